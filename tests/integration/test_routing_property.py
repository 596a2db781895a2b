"""Property: every spelling of a path is refused (400) or gets exactly the rules of the route LIT runs.

Two servers on loopback sockets, both werkzeug's real request parsing:

* the oracle: LIT 1.3.1's own router (`lit_nlp.lib.wsgi_app.App`) over the same
  client root, with handlers that only answer their route's name, and no rules:
  it tells which handler (or static file) a spelling reaches;
* the guarded server: `security.SecureApp` around the real LIT app on the
  embedded default model, with a `--data_dir`.

Hypothesis spells every LIT API route and some static paths (percent escapes,
`;params`, extra/trailing slashes, `.`/`..` segments, backslashes, case, absolute
form, fragments, non-ASCII ...). For each spelling, the guarded server's status
for a fixed set of probes (GET; POST text/plain; cross-origin POST; an over-long
prompt; a file endpoint pointed outside the data folder; a valid /get_info) must
be one refusal (400, or 403 for a foreign Host) for every probe, or equal the canonical route's statuses. No probe may
read or write a file outside the data folder.

Spellings tried by hand (and their answers, which the property covers) are in
SPELLINGS_TRIED below.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lit_nlp.lib import wsgi_app
from werkzeug import wrappers

from lit_app.data import datasets
from lit_app.edge import http_server, limits, security, security_config
from lit_app.serving import model_group
from lit_app import server
from lit_app.model import shared_model

MODEL = "smollm2"
STATIC_PATHS = ("/", "/index.html", "/main.js", "/static/index.html", "/request_guard.js", "/nowhere.js")
FILE_ROUTES = ("/save_datapoints", "/load_datapoints", "/create_dataset", "/create_model")
MAX_PROMPT = 50
MARKER = "outside-marker-7f3a"

# (spelling, answer of the guarded server to GET and to a JSON POST): probes tried by hand.
SPELLINGS_TRIED = [
    ("/get_info;x", "400 (LIT would run get_info)"),
    ("/get_info;", "400"),
    ("//get_info", "400 (werkzeug merges the slashes)"),
    ("///get_info", "400"),
    ("/get_info/", "400 (LIT strips one trailing slash)"),
    ("/get%5Finfo", "400 (decoded to /get_info)"),
    ("/get_info%3Bx", "400 (decoded to /get_info;x)"),
    ("/get_info%3Fx", "400 (decoded to /get_info?x)"),
    ("/get_info%23x", "400 (decoded to /get_info#x)"),
    ("/%2Fget_info", "400"),
    ("/x/../get_info", "400"),
    ("/./get_info", "400"),
    ("/GET_INFO", "static rules: GET 404, POST 405 (a different, static route)"),
    ("http://127.0.0.1:PORT/get_info", "400 (absolute form)"),
    ("/get_info#x", "400"),
    ("/load_datapoints;x?path=/outside/secret.jsonl", "400"),
    ("/save_datapoints;x?path=/outside/victim", "400"),
    ("/create_dataset;x", "400"),
    ("/static%2Findex.html", "400"),
    ("/static/./index.html", "400"),
    ("/..%2f..%2fetc/passwd", "400"),
    ("/main.js;x", "400"),
    ("/\\get_info", "400"),
    ("/get_info\u00e9", "400 (non-ASCII)"),
    ("/get_info", "GET 405, POST text/plain 403, POST JSON 200 (the canonical route)"),
    ("/main.js", "GET 200, POST 405"),
]


# ---------------------------------------------------------------------------
# Servers.


class _Served:
    def __init__(self, app, max_connections: int = 64):
        self.httpd = http_server.make_server("127.0.0.1", 0, app, max_connections)
        self.port = int(self.httpd.server_port)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def request(self, method: str, target: bytes, body: bytes = b"", headers: dict | None = None
                ) -> tuple[int, bytes]:
        """One request with `target` sent byte for byte on the request line."""
        h = {"Host": f"127.0.0.1:{self.port}", "Connection": "close", **(headers or {})}
        if body or method == "POST":
            h["Content-Length"] = str(len(body))
        head = b"%s %s HTTP/1.1\r\n" % (method.encode(), target)
        head += b"".join(f"{k}: {v}\r\n".encode() for k, v in h.items()) + b"\r\n"
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as sock:
            sock.sendall(head + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        _, _, payload = rest.partition(b"\r\n\r\n")
        assert status_line.startswith(b"HTTP/1."), f"no answer to {method} {target!r}: {data[:200]!r}"
        return int(status_line.split()[1]), payload

    def stop(self) -> None:
        self.httpd.shutdown()
        self.thread.join()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("routing")
    data, outside = base / "data", base / "outside"
    data.mkdir()
    outside.mkdir()
    (data / "prompts.jsonl").write_text('{"prompt": "Hello"}\n', encoding="utf-8")
    (outside / "secret.jsonl").write_text(json.dumps({"prompt": MARKER}) + "\n", encoding="utf-8")
    (outside / "victim.lit.jsonl").write_text("keep me\n", encoding="utf-8")
    return data, outside


@pytest.fixture(scope="module")
def lit(default_lm, stub_client_root):
    root = stub_client_root
    shared = shared_model.SharedLM(default_lm, max_new_tokens=4)
    return server.build_app(model_group.lit_models(shared, MODEL), datasets.get_datasets(), root), root


@pytest.fixture(scope="module")
def servers(lit, folders):
    app, root = lit
    data, _ = folders
    # LIT's own router, answering the route name instead of running the handler.
    handlers = {route: (lambda _app, _req, _env, route=route: wrappers.Response(f"route:{route}"))
                for route in limits.API_PATHS}
    oracle = _Served(wsgi_app.App(handlers=handlers, project_root=root, index_file="static/index.html"))
    config = security_config.SecurityConfig(port=0, data_dir=str(data), allowed_hosts=("127.0.0.1",),
                                     limits=limits.Limits(max_prompt_chars=MAX_PROMPT))
    guarded = _Served(security.SecureApp(app, config))
    yield oracle, guarded
    oracle.stop()
    guarded.stop()


def test_the_middleware_knows_exactly_lit_s_api_routes(lit):
    app, _ = lit
    # LIT keeps its handler map on its WSGI app; the middleware's list must be the same set.
    assert set(app._wsgi_app._handlers) == set(limits.API_PATHS)  # pylint: disable=protected-access


# ---------------------------------------------------------------------------
# Probes.


def _probes(route: str, outside: Path) -> list[tuple[str, str, bytes, dict]]:
    """(method, query, body, headers) sent to a spelling of `route`."""
    json_h = {"Content-Type": "application/json"}
    long = "x" * (MAX_PROMPT + 1)  # as a model input, and as /post_new_data's input (the data itself)
    too_long = json.dumps({"inputs": [{"id": "a", "prompt": long, "data": {"prompt": long}}]}).encode()
    probes = [
        ("GET", "", b"", {}),
        ("POST", "", b"{}", {"Content-Type": "text/plain"}),
        ("POST", "", b"{}", {**json_h, "Origin": "http://evil.example"}),
        ("POST", "", too_long, json_h),
        ("POST", f"?dataset_name=case_studies&path={outside}/secret.jsonl", b'{"inputs": []}', json_h),
        ("POST", f"?dataset_name=case_studies&path={outside}/victim", json.dumps(
            {"inputs": [{"id": "v", "data": {"prompt": "overwrite"}, "meta": {}}]}).encode(), json_h),
        ("POST", "?dataset_name=jsonl_prompts", json.dumps(
            {"config": {"new_name": "stolen", "path": f"{outside}/secret.jsonl"}}).encode(), json_h),
        ("POST", f"?model_name={MODEL}", json.dumps(
            {"config": {"new_name": "m2", "model_name_or_path": str(outside)}}).encode(), json_h),
    ]
    if route == "/get_info":
        probes.append(("POST", "", b"{}", json_h))
    return probes


def _signature(served: _Served, target: bytes, route: str, outside: Path, bodies: list) -> tuple[int, ...]:
    statuses = []
    for method, query, body, headers in _probes(route, outside):
        status, payload = served.request(method, target + query.encode(), body, headers)
        statuses.append(status)
        bodies.append(payload)
    return tuple(statuses)


# ---------------------------------------------------------------------------
# Spellings.

_HEX = "0123456789ABCDEFabcdef"


def _escape_one(path: str, i: int, lower: bool) -> str:
    code = f"%{ord(path[i]):02X}" if ord(path[i]) < 128 else "".join(f"%{b:02X}" for b in path[i].encode())
    return path[:i] + (code.lower() if lower else code) + path[i + 1:]


@st.composite
def spellings(draw) -> tuple[str, str]:
    """(canonical path, a spelling of it)."""
    canonical = draw(st.sampled_from(sorted(limits.API_PATHS) + list(STATIC_PATHS)))
    path = canonical
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from([
            "escape", "params", "trailing", "leading", "double", "dot", "dotdot", "query_escape",
            "hash_escape", "upper", "backslash", "absolute", "fragment", "non_ascii", "double_escape",
            "nul", "plain"]))
        if kind == "escape" and path:
            path = _escape_one(path, draw(st.integers(0, len(path) - 1)), draw(st.booleans()))
        elif kind == "params":
            path += ";" + draw(st.text("abc=1;", max_size=4))
        elif kind == "trailing":
            path += "/"
        elif kind == "leading":
            path = "/" * draw(st.integers(1, 3)) + path
        elif kind == "double" and "/" in path:
            i = path.index("/")
            path = path[:i] + "//" + path[i + 1:]
        elif kind == "dot":
            path = "/." + path
        elif kind == "dotdot":
            path = "/" + draw(st.sampled_from(["x", "static", "..", "."])) + "/.." + path
        elif kind == "query_escape":
            path += draw(st.sampled_from(["%3F", "%3f"])) + "x=1"
        elif kind == "hash_escape":
            path += "%23x"
        elif kind == "upper":
            path = path.upper()
        elif kind == "backslash":
            path = path.replace("/", "\\", 1)
        elif kind == "absolute":
            path = "http://127.0.0.1:1" + path
        elif kind == "fragment":
            path += "#x"
        elif kind == "non_ascii":
            path += draw(st.sampled_from(["\u00e9", "\uff47", "\u2215"]))
        elif kind == "double_escape":
            path = path.replace("_", "%255F", 1)
        elif kind == "nul":
            path += "%00"
    return canonical, path


def _oracle_route(oracle: _Served, target: bytes) -> str | None:
    """The API route LIT's router dispatches `target` to; None for a page or static file."""
    _, payload = oracle.request("GET", target)
    text = payload.decode("utf-8", "replace")
    return text[len("route:"):] if text.startswith("route:") else None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(case=spellings())
def test_every_spelling_is_refused_or_gets_the_rules_of_its_route(servers, folders, case):
    oracle, guarded = servers
    data, outside = folders
    _, spelled = case
    target = spelled.encode("utf-8")
    route = _oracle_route(oracle, target)
    bodies: list[bytes] = []
    got = _signature(guarded, target, route or "", outside, bodies)
    # Refused: every probe gets the same refusal before any route's rules (400 for the path;
    # 403 when werkzeug takes the Host from an absolute-form target, `http://other/...`).
    refused = len(set(got)) == 1 and got[0] in (400, 403)
    if route is not None:
        expected = _signature(guarded, route.encode(), route, outside, [])
        assert refused or got == expected, (spelled, route, got, expected)
    else:  # a page or a static file (or nothing): never an API rule, never another file
        assert refused or (got[0] in (200, 404) and all(s == 405 for s in got[1:])), (spelled, got)
        if not refused and got[0] == 200:
            _, page = oracle.request("GET", target)
            assert bodies[0] == page
    assert not any(MARKER.encode() in b for b in bodies), spelled
    assert sorted(p.name for p in outside.iterdir()) == ["secret.jsonl", "victim.lit.jsonl"]
    assert (outside / "victim.lit.jsonl").read_text(encoding="utf-8") == "keep me\n"


def test_the_canonical_spellings_are_served_with_their_rules(servers, folders):
    oracle, guarded = servers
    _, outside = folders
    for route in sorted(limits.API_PATHS):
        assert _oracle_route(oracle, route.encode()) == route
        got = _signature(guarded, route.encode(), route, outside, [])
        assert got[:4] == (405, 403, 403, 400), (route, got)
        if route in FILE_ROUTES:
            assert 403 in got[4:8], (route, got)  # confined to the data folder
    assert _signature(guarded, b"/get_info", "/get_info", outside, [])[-1] == 200
    assert _signature(guarded, b"/main.js", "", outside, [])[0] == 200


@pytest.mark.parametrize("spelled", [s for s, _ in SPELLINGS_TRIED if "PORT" not in s])
def test_spellings_tried_by_hand(servers, folders, spelled):
    oracle, guarded = servers
    _, outside = folders
    target = spelled.encode("utf-8")
    route = _oracle_route(oracle, target)
    got = _signature(guarded, target, route or "", outside, [])
    canonical = spelled in ("/get_info", "/main.js", "/GET_INFO")
    if canonical:
        assert 400 not in got[:3], (spelled, got)
    else:
        assert all(s == 400 for s in got), (spelled, got)
