"""The request rules of lit_app/edge/security.py on the real LIT app and the embedded default model.

Requests are real WSGI requests (werkzeug's test client) through `SecureApp`
around the same LIT app the server runs; the last test starts the real server
on 0.0.0.0 and drives it over HTTP (token flow).
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from werkzeug.test import Client

from lit_app.serving import client_build, model_group, request_guard
from lit_app.data import datasets
from lit_app.schema import fields
from lit_app.edge import limits, security, security_config, tokens
from lit_app import server
from sequence_salience import field_rules
from tests.server_process import ServerProcess

PORT = 5432
HOST = f"127.0.0.1:{PORT}"
ORIGIN = f"http://{HOST}"
MODEL = "smollm2"
GEN, SAL, TOK = fields.model_group_names(MODEL)
TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def shared(make_shared):
    return make_shared(max_new_tokens=6)


def secure(lit, **config) -> Client:
    return Client(security.SecureApp(lit, security_config.SecurityConfig(port=PORT, **config)), use_cookies=False)


@pytest.fixture()
def client(lit):
    return secure(lit)


def post(client, path, body=None, *, host=HOST, ctype="application/json", headers=None, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body if body is not None else {})
    h = {"Host": host, **(headers or {})}
    if ctype:
        h["Content-Type"] = ctype
    return client.post(path, data=data, headers=h, **kw)


def get(client, path="/", *, host=HOST, headers=None):
    return client.get(path, headers={"Host": host, **(headers or {})})


def preds(client, model, *examples, query="", **kw):
    body = {"inputs": [{"id": f"ex{i}", "data": ex} for i, ex in enumerate(examples)]}
    return post(client, f"/get_preds?model={model}{query}", body, **kw)


def one_line_error(response, status: int) -> str:
    assert response.status_code == status, response.get_data(as_text=True)
    text = response.get_data(as_text=True)
    assert text and "\n" not in text and "Traceback" not in text and 'File "' not in text, text
    assert response.headers["Content-Type"].startswith("text/plain")
    return text


# ---------------------------------------------------------------------------
# Host.


@pytest.mark.parametrize("host", ["127.0.0.1:5432", "localhost:5432", "LOCALHOST:5432", "[::1]:5432",
                                  "localhost.:5432"])
def test_loopback_hosts_with_the_port_are_served(client, host):
    assert get(client, host=host).status_code == 200


@pytest.mark.parametrize("host", ["evil.example:5432", "127.0.0.1:9999", "localhost", "127.0.0.1.evil.example:5432",
                                  "[::1]", "192.168.1.7:5432", "", "localhost:5432@evil", "[::1:5432"])
def test_other_hosts_get_403_with_a_one_line_reason(client, host):
    r = get(client, host=host)
    assert "Host" in one_line_error(r, 403)
    # A POST that would compute is refused the same way, before LIT parses it.
    assert post(client, "/get_info", host=host).status_code == 403


def test_allowed_hosts_flag(lit):
    c = secure(lit, allowed_hosts=("lab.example", "proxy.example:8443"))
    assert get(c, host="lab.example:5432").status_code == 200
    assert get(c, host="lab.example").status_code == 200  # a name without a port: any port
    assert get(c, host="proxy.example:8443").status_code == 200
    assert get(c, host="proxy.example:5432").status_code == 403  # a name with a port: that port only
    assert get(c, host="other.example:5432").status_code == 403
    assert get(secure(lit, allowed_hosts=("*",)), host="anything.example:1").status_code == 200


def test_bound_address_and_ip_literals_on_a_wildcard_bind(lit):
    auth = {"Authorization": f"token {TOKEN}"}
    bound = secure(lit, host="10.1.2.3", token=TOKEN)
    assert get(bound, host="10.1.2.3:5432", headers=auth).status_code == 200
    assert get(bound, host="10.9.9.9:5432", headers=auth).status_code == 403
    wildcard = secure(lit, host="0.0.0.0", token=TOKEN)
    assert get(wildcard, host="192.168.1.7:5432", headers=auth).status_code == 200  # an IP cannot be rebound
    assert get(wildcard, host="evil.example:5432", headers=auth).status_code == 403
    assert get(wildcard, host="192.168.1.7:5433", headers=auth).status_code == 403


# ---------------------------------------------------------------------------
# POST rules and methods.


@pytest.mark.parametrize("ctype", ["text/plain", "", "application/x-www-form-urlencoded", "multipart/form-data",
                                   "application/jsonp"])
def test_post_without_json_content_type_is_refused(client, ctype):
    r = post(client, "/get_info", ctype=ctype)
    assert "Content-Type" in one_line_error(r, 403)


def test_post_with_json_content_type_is_served(client):
    for ctype in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
        r = post(client, "/get_info", ctype=ctype)
        assert r.status_code == 200 and GEN in json.loads(r.data)["models"]


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://localhost:5432", "https://127.0.0.1:5432",
                                    "http://127.0.0.1:5433"])
def test_cross_origin_post_is_refused(client, origin):
    r = post(client, "/get_info", headers={"Origin": origin})
    assert "Origin" in one_line_error(r, 403)


def test_same_origin_post_and_fetch_metadata(client):
    assert post(client, "/get_info", headers={"Origin": ORIGIN}).status_code == 200
    assert post(client, "/get_info", headers={"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin"}).status_code == 200
    for site in ("cross-site", "same-site"):
        r = post(client, "/get_info", headers={"Sec-Fetch-Site": site})
        assert "Cross-site" in one_line_error(r, 403)


def test_methods(client):
    r = get(client, "/get_preds?model=smollm2")
    assert "POST" in one_line_error(r, 405) and r.headers["Allow"] == "POST"
    assert one_line_error(post(client, "/"), 405)
    assert client.open("/get_info", method="OPTIONS", headers={"Host": HOST}).status_code == 405
    assert client.open("/", method="PUT", headers={"Host": HOST}).status_code == 405
    assert get(client, "/..%2f..%2fetc/passwd").status_code in (400, 404)
    assert "'..'" in one_line_error(get(client, "/../lit_app/server.py"), 400)


def test_answers_carry_hardening_headers(client):
    r = get(client)
    assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["X-Frame-Options"] == "SAMEORIGIN"
    assert r.headers["Referrer-Policy"] == "no-referrer"


def test_pages_and_files_are_checked_on_each_load_and_a_current_copy_is_answered_304(lit, client):
    """LIT alone answers a file with an hour of freshness and no validator: a browser kept running the old page and
    bundle for an hour after a restart on a new build. Through SecureApp each carries its content's tag and
    `no-cache`; the tag sent back gets a 304 without the body, another tag the whole file (lit_app/edge/static_cache.py)."""
    for path in ("/", "/main.js", f"/{client_build.BUNDLE_NAME}", "/fonts/fonts.css"):
        direct = Client(lit).get(path)
        assert direct.status_code == 200 and "max-age=3600" in direct.headers["Cache-Control"]
        assert "ETag" not in direct.headers
        r = get(client, path)
        assert r.status_code == 200 and r.data == direct.data
        assert r.headers["Cache-Control"] == "no-cache" and "Expires" not in r.headers
        tag = r.headers["ETag"]
        assert tag == '"' + hashlib.sha256(direct.data).hexdigest()[:32] + '"'
        again = get(client, path, headers={"If-None-Match": tag})
        assert (again.status_code, again.data, again.headers["ETag"]) == (304, b"", tag)
        assert "Content-Length" not in again.headers and again.headers["X-Content-Type-Options"] == "nosniff"
        other = get(client, path, headers={"If-None-Match": '"an-old-build"'})
        assert other.status_code == 200 and other.data == direct.data
    info = post(client, "/get_info", headers={"If-None-Match": "*"})
    assert info.status_code == 200 and "ETag" not in info.headers  # the API is never cached
    assert get(client, "/no-such-file.js", headers={"If-None-Match": "*"}).status_code == 404


# ---------------------------------------------------------------------------
# Token.


def test_token_flow(lit):
    c = secure(lit, token=TOKEN)
    assert "needs a token" in one_line_error(get(c), 403)
    assert "Wrong token" in one_line_error(get(c, f"/?token={TOKEN}x"), 403)
    assert post(c, "/get_info").status_code == 403
    # ?token= on a page load: cookie set, token dropped from the address bar.
    r = get(c, f"/?token={TOKEN}&layout=default")
    assert r.status_code == 303 and r.headers["Location"] == "/?layout=default"
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith(f"sequence_salience_token_{PORT}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    jar = {"Cookie": cookie.split(";", 1)[0]}
    r = c.get(f"/?token={TOKEN}", headers={"Host": HOST}, environ_overrides={"PATH_INFO": "//evil.example/"})
    # Never a redirect off this server ("//evil.example/" would be protocol-relative): not canonical, 400.
    assert "canonical" in one_line_error(r, 400)
    # LIT's client then works with the cookie alone: the page, its scripts and its POSTs.
    assert get(c, headers=jar).status_code == 200
    assert get(c, "/main.js", headers=jar).status_code == 200
    assert post(c, "/get_info", headers=jar).status_code == 200
    assert post(c, "/get_info", headers={"Cookie": f"sequence_salience_token_{PORT}=nope"}).status_code == 403
    assert post(c, "/get_info", headers={"Cookie": f"sequence_salience_token_9999={TOKEN}"}).status_code == 403
    # Scripts use a header.
    assert post(c, "/get_info", headers={"Authorization": f"token {TOKEN}"}).status_code == 200
    assert post(c, "/get_info", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    r = post(c, f"/get_info?token={TOKEN}")
    assert r.status_code == 200 and r.headers["Set-Cookie"].startswith(f"sequence_salience_token_{PORT}=")
    # The token never replaces the other rules.
    assert post(c, "/get_info", headers={**jar, "Origin": "http://evil.example"}).status_code == 403


def test_every_bind_has_a_token_unless_no_token_on_loopback(monkeypatch):
    monkeypatch.delenv(tokens.TOKEN_ENV, raising=False)
    for host in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.2"):
        cfg = security_config.config_from_args(server.parse_args(["--host", host, "--port", "6000"]))
        assert cfg.token_generated and re.fullmatch(r"[0-9a-f]{48}", cfg.token), host
    cfg = security_config.config_from_args(server.parse_args(["--host", "0.0.0.0", "--port", "6000"]))
    assert cfg.browser_url() == f"http://127.0.0.1:6000/?token={cfg.token}"
    # Two starts, two tokens.
    assert security_config.config_from_args(server.parse_args([])).token != security_config.config_from_args(
        server.parse_args([])).token
    given = security_config.config_from_args(server.parse_args(["--host", "10.0.0.2", "--token", TOKEN]))
    assert given.token == TOKEN and not given.token_generated and given.browser_url().startswith("http://10.0.0.2:")
    monkeypatch.setenv(tokens.TOKEN_ENV, TOKEN)
    assert security_config.config_from_args(server.parse_args([])).token == TOKEN
    monkeypatch.delenv(tokens.TOKEN_ENV)
    # The explicit opt-out: loopback only.
    off = security_config.config_from_args(server.parse_args(["--no_token"]))
    assert off.token is None and off.browser_url() == "http://127.0.0.1:5432/"
    assert security_config.config_from_args(server.parse_args(["--no_token", "--host", "::1"])).token is None
    for argv in (["--no_token", "--host", "0.0.0.0"], ["--no_token", "--token", TOKEN], ["--token", "short"]):
        with pytest.raises(SystemExit):
            server.parse_args(argv)
    with pytest.raises(ValueError, match="token is required"):
        security_config.SecurityConfig(host="0.0.0.0")


# ---------------------------------------------------------------------------
# File paths.

FILE_REQUESTS = [
    ("/create_dataset?dataset_name=jsonl_prompts", {"config": {"new_name": "x", "path": "/etc/passwd"}}),
    ("/create_model?model_name=smollm2", {"config": {"new_name": "m", "model_name_or_path": "/etc"}}),
    ("/save_datapoints?dataset_name=case_studies&path=/tmp/ss_should_not_exist", {"inputs": []}),
    ("/load_datapoints?dataset_name=case_studies&path=/etc/passwd", {"inputs": []}),
]


@pytest.mark.parametrize("path,body", FILE_REQUESTS, ids=lambda v: v if isinstance(v, str) else "")
def test_file_endpoints_are_off_without_data_dir(client, path, body):
    assert "--data_dir" in one_line_error(post(client, path, body), 403)
    assert not os.path.exists("/tmp/ss_should_not_exist.lit.jsonl")


@pytest.fixture()
def data_dirs(tmp_path):
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (data / "prompts.jsonl").write_text('{"prompt": "Hello"}\n{"prompt": "Bye"}\n', encoding="utf-8")
    (outside / "secret.jsonl").write_text('{"prompt": "secret"}\n', encoding="utf-8")
    (outside / "victim.lit.jsonl").write_text("keep me\n", encoding="utf-8")
    os.symlink(outside, data / "link_dir")
    os.symlink(outside / "victim.lit.jsonl", data / "evil.lit.jsonl")
    os.symlink(outside / "secret.jsonl", data / "secret_link.jsonl")
    return data, outside


def test_file_endpoints_work_inside_data_dir(lit, data_dirs):
    data, _ = data_dirs
    c = secure(lit, data_dir=str(data))
    examples = [{"id": "a1", "data": {"prompt": "saved one", "system": "", "target": "", "case": "", "_id": "a1"}, "meta": {}}]
    r = post(c, "/save_datapoints?dataset_name=case_studies&path=saved", {"inputs": examples})
    assert r.status_code == 200, r.data
    assert json.loads(r.data) == str(data / "saved.lit.jsonl")
    assert [json.loads(line)["data"]["prompt"] for line in (data / "saved.lit.jsonl").open()] == ["saved one"]
    r = post(c, "/load_datapoints?dataset_name=case_studies&path=saved.lit.jsonl", {"inputs": []})
    assert r.status_code == 200 and [ex["data"]["prompt"] for ex in json.loads(r.data)] == ["saved one"]
    r = post(c, f"/load_datapoints?dataset_name=case_studies&path={data / 'prompts.jsonl'}", {"inputs": []})
    assert r.status_code == 200 and [ex["data"]["prompt"] for ex in json.loads(r.data)] == ["Hello", "Bye"]
    r = post(c, "/create_dataset?dataset_name=jsonl_prompts", {"config": {"new_name": "mine", "path": "prompts.jsonl"}})
    assert r.status_code == 200, r.data
    info, name = json.loads(r.data)
    assert name == "mine" and "mine" in info["datasets"]


@pytest.mark.parametrize("given", ["../outside/secret.jsonl", "sub/../../outside/secret.jsonl", "..", "/etc/passwd",
                                   "link_dir/secret.jsonl", "secret_link.jsonl", "evil", "evil.lit.jsonl",
                                   "link_dir/new"])
def test_paths_leading_out_of_data_dir_are_refused(lit, data_dirs, given):
    data, outside = data_dirs
    c = secure(lit, data_dir=str(data))
    before = sorted(p.name for p in outside.iterdir())
    ex = [{"id": "a1", "data": {"prompt": "x", "system": "", "target": "", "case": "", "_id": "a1"}, "meta": {}}]
    for path, body in (
        (f"/save_datapoints?dataset_name=case_studies&path={given}", {"inputs": ex}),
        (f"/load_datapoints?dataset_name=case_studies&path={given}", {"inputs": []}),
        ("/create_dataset?dataset_name=jsonl_prompts", {"config": {"new_name": "y", "path": given}}),
    ):
        msg = one_line_error(post(c, path, body), 403)
        assert "'..'" in msg or "outside --data_dir" in msg
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "victim.lit.jsonl").read_text(encoding="utf-8") == "keep me\n"


# ---------------------------------------------------------------------------
# Errors and limits.


def test_error_bodies_are_one_line_and_a_client_mistake_logs_one_line(lit, client, caplog):
    query = f"/get_interpretations?interpreter=nope&model={GEN}&dataset_name=case_studies"
    raw = Client(lit).post(query, data=json.dumps({"inputs": []}))
    assert raw.status_code == 500 and "Traceback" in raw.get_data(as_text=True)  # LIT alone leaks it
    caplog.clear()
    r = post(client, query, {"inputs": []})
    assert one_line_error(r, 400).startswith("Unknown or missing name 'nope' in the request. Fix:")  # the client's mistake
    # One warning line, no traceback (LIT's own "Uncaught error" log is dropped; a server fault's traceback
    # is logged by the middleware: tests/unit/test_limits.py).
    assert "Unknown or missing name 'nope'" in caplog.text and "Traceback" not in caplog.text


@pytest.mark.parametrize("body,needle", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    ([1, 2], "must be a JSON object"),
    ({"inputs": "x"}, "inputs"),
    ({"inputs": [5]}, "inputs[0]"),
    ({"inputs": [{"id": "a"}]}, 'no "data"'),
    ({"inputs": [{"id": "a", "data": {"prompt": 5}}]}, '"prompt" must be a string'),
    ({"inputs": [{"id": "a", "data": {"prompt": "hi", "system": ["x"]}}]}, '"system" must be a string'),
    ({"inputs": [{"id": "a", "data": {"prompt": "hi", "chat": "maybe"}}]}, '"chat"'),
    ({"inputs": [{"id": "a", "data": {"prompt": "hi", "target_span": 3}}]}, '"target_span"'),
], ids=["malformed", "not-utf8", "list-body", "inputs-str", "input-int", "no-data", "prompt-int", "system-list",
        "chat", "span-int"])
def test_malformed_and_mistyped_requests_get_400(client, body, needle):
    data = body if isinstance(body, bytes) else json.dumps(body)
    assert needle in one_line_error(post(client, f"/get_preds?model={SAL}", data), 400)


def test_unknown_names_get_400(client):
    ex = {"prompt": "hi"}
    assert "Unknown model 'nope'" in one_line_error(preds(client, "nope", ex), 400)
    assert GEN in one_line_error(preds(client, "nope", ex), 400)  # names the known ones
    assert "No model" in one_line_error(post(client, "/get_preds", {"inputs": []}), 400)
    assert "Unknown dataset" in one_line_error(preds(client, GEN, ex, query="&dataset_name=nope"), 400)
    assert "progress_indicator" in one_line_error(preds(client, GEN, ex, query="&progress_indicator=x"), 400)
    assert "not a LIT type" in one_line_error(preds(client, GEN, ex, query="&requested_types=Bogus"), 400)


def test_body_size_limit(lit):
    c = secure(lit, limits=limits.Limits(max_body_bytes=1000))
    big = {"inputs": [{"id": "a", "data": {"prompt": "x" * 2000}}]}
    assert "--max_body_bytes" in one_line_error(post(c, f"/get_preds?model={TOK}", big), 413)
    # Chunked (no Content-Length): read up to the limit, then refused.
    r = c.open(f"/get_preds?model={TOK}", method="POST", input_stream=io.BytesIO(json.dumps(big).encode()),
               headers={"Host": HOST, "Content-Type": "application/json"},
               environ_overrides={"wsgi.input_terminated": True})
    assert "--max_body_bytes" in one_line_error(r, 413)
    small = {"inputs": [{"id": "a", "data": {"prompt": "Hello"}}]}
    assert post(c, f"/get_preds?model={TOK}", small).status_code == 200


def test_prompt_length_ig_steps_smooth_grad_samples_and_max_new_tokens_limits(lit):
    c = secure(lit, limits=limits.Limits(max_prompt_chars=100, max_ig_steps=4))
    msg = one_line_error(preds(c, TOK, {"prompt": "x" * 60, "target": "y" * 41}), 400)
    assert "101 characters" in msg and "100" in msg and "--max_prompt_chars" in msg
    r = preds(c, TOK, {"prompt": "Hello " * 10, "target": "y" * 40})  # exactly 100
    assert r.status_code == 200 and json.loads(r.data)[0][fields.TOKENS]
    for steps in (5, -1, 1.5, "abc", True, [4]):
        msg = one_line_error(preds(c, SAL, {"prompt": "hi", "ig_steps": steps}), 400)
        assert '"ig_steps"' in msg and "0 (off) to 4" in msg and "--max_ig_steps" in msg
    c_sg = secure(lit, limits=limits.Limits(max_smooth_grad_samples=3))
    for samples in (4, -1, 2.5, "abc", False):
        msg = one_line_error(preds(c_sg, SAL, {"prompt": "hi", "smooth_grad_samples": samples}), 400)
        assert '"smooth_grad_samples"' in msg and "0 (off) to 3" in msg and "--max_smooth_grad_samples" in msg
    assert preds(c_sg, TOK, {"prompt": "hi", "smooth_grad_samples": 3}).status_code == 200
    # A row's budget: the rule's range (above the server's --max_new_tokens it is capped, not refused).
    for n in (0, 1025, "many"):
        msg = one_line_error(preds(c, GEN, {"prompt": "hi", "max_new_tokens": n}), 400)
        assert '"max_new_tokens"' in msg and "1 to 1024" in msg
    # Within the limits the request reaches the model.
    assert preds(c, TOK, {"prompt": "hi", "ig_steps": "4", "max_new_tokens": 6}).status_code == 200
    with pytest.raises(ValueError, match="max_ig_steps"):
        limits.Limits(max_ig_steps=field_rules.IG_STEPS.hi + 1)


def test_get_info_publishes_the_prompt_length_limit_the_browser_checks(lit):
    # The datapoint editor refuses a row longer than this before it is added (frontend/src/lit_fixes.ts).
    for most in (100, 32_000):
        c = secure(lit, limits=limits.Limits(max_prompt_chars=most))
        info = json.loads(post(c, "/get_info").data)
        assert info["requestLimits"] == {"max_prompt_chars": most,
                                         "max_counts": {"ig_steps": 256, "smooth_grad_samples": 256},
                                         "pattern": {"max_chars": 1000, "max_repeat": 1000, "max_expanded": 10000,
                                                     "max_depth": 32}}
    # The count limits the IG steps / SmoothGrad samples fields keep to (frontend/src/shared/methods.ts).
    c = secure(lit, limits=limits.Limits(max_ig_steps=32, max_smooth_grad_samples=8))
    assert json.loads(post(c, "/get_info").data)["requestLimits"]["max_counts"] == {"ig_steps": 32,
                                                                                   "smooth_grad_samples": 8}


def test_a_full_server_answers_503_with_retry_after(lit, shared):
    app = security.SecureApp(lit, security_config.SecurityConfig(port=PORT, limits=limits.Limits(max_pending=1)))
    c = Client(app, use_cookies=False)
    first: dict = {}
    shared.lock.acquire()  # the model is busy: the first request waits for it, holding the only slot
    try:
        # A salience request (never cached on disk, unlike a generation) needs the model.
        t = threading.Thread(target=lambda: first.setdefault("r", preds(c, SAL, {"prompt": "Name a color.",
                                                                                 "target": " Blue."})))
        t.start()
        deadline = time.monotonic() + 30
        while app.slots.in_use < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert app.slots.in_use == 1
        r = preds(c, GEN, {"prompt": "hi"})
        assert "busy" in one_line_error(r, 503) and r.headers["Retry-After"] == "2"
        assert post(c, "/get_info").status_code == 200  # metadata never waits for the model
        r = preds(c, TOK, {"prompt": "hi"})  # nor do tokens (the tokenizer copy)
        assert r.status_code == 200 and json.loads(r.data)[0][fields.TOKENS]
        # Progress polls need no model, so a full server still answers them.
        r = preds(c, SAL, {"prompt": "Name a color.", "detail": "poll"})
        assert r.status_code == 200 and json.loads(r.data)[0][fields.SALIENCE]["detail"]["state"] == "none"
    finally:
        shared.lock.release()
    t.join(60)
    assert first["r"].status_code == 200 and json.loads(first["r"].data)[0][fields.RESPONSE]
    assert app.slots.in_use == 0 and app.slots.rejected == 1 and app.slots.peak == 1
    assert preds(c, TOK, {"prompt": "hi"}).status_code == 200
    # An error inside LIT frees its slot too.
    post(c, f"/get_interpretations?interpreter=nope&model={GEN}", {"inputs": []})
    assert app.slots.in_use == 0


def test_valid_requests_answer_as_lit_alone_does(lit, client):
    ex = {"prompt": "What is the capital of France?"}
    body = {"inputs": [{"id": "x", "data": ex}]}
    direct = Client(lit).post(f"/get_preds?model={GEN}", data=json.dumps(body))
    guarded = preds(client, GEN, ex)
    assert guarded.status_code == direct.status_code == 200
    assert json.loads(guarded.data) == json.loads(direct.data)
    assert "Paris" in json.loads(guarded.data)[0][fields.RESPONSE]


def test_client_root_loads_the_request_guard_before_lit(tmp_path):
    root = Path(client_build.build_client_root(str(tmp_path / "root"), bundle_path=str(tmp_path / "none.js")))
    html = (root / "static" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<script src="request_guard\.js"></script>\s*<script src="main\.js"></script>', html)
    assert (root / request_guard.REQUEST_GUARD_NAME).read_text(encoding="utf-8") == request_guard.REQUEST_GUARD_JS


# ---------------------------------------------------------------------------
# The real server on a non-loopback address. Each test starts its own server, not the session's
# `lit_server`: the start-up flags are what is tested (--host 0.0.0.0, the defaults, --no_token), and the
# log is read whole after the server stops.


def _request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def test_real_server_on_0000_requires_its_printed_token(tmp_path):
    with ServerProcess(["--host", "0.0.0.0"], tmp_path) as proc:
        port, url = proc.port, proc.url
        m = re.fullmatch(rf"http://127\.0\.0\.1:{port}/\?token=([0-9a-f]{{48}})", url)
        assert m, url
        token = m.group(1)
        assert _request(port, "GET", "/")[0] == 403
        assert _request(port, "POST", "/get_info", "{}", {"Content-Type": "application/json"})[0] == 403
        status, headers, _ = _request(port, "GET", f"/?token={token}")
        assert status == 303 and headers["Location"] == "/"
        jar = {"Cookie": headers["Set-Cookie"].split(";", 1)[0]}
        status, _, page = _request(port, "GET", "/", headers=jar)
        assert status == 200 and "request_guard.js" in page
        status, _, body = _request(port, "POST", "/get_info", "{}", {**jar, "Content-Type": "application/json"})
        assert status == 200 and "smollm2" in json.loads(body)["models"]
        status, _, body = _request(port, "POST", "/get_info", "{}", {**jar, "Content-Type": "text/plain"})
        assert status == 403 and "\n" not in body
        # Another machine's view: the server's own non-loopback IP, if it has one, is an allowed Host.
        status, _, _ = _request(port, "GET", "/", headers={**jar, "Host": f"192.0.2.10:{port}"})
        assert status == 200
        status, _, _ = _request(port, "GET", "/", headers={**jar, "Host": f"evil.example:{port}"})
        assert status == 403


def test_real_server_on_loopback_requires_its_token_and_keeps_it_out_of_the_log(tmp_path):
    with ServerProcess([], tmp_path) as proc:  # the default: loopback, a generated token
        assert re.fullmatch(rf"http://127\.0\.0\.1:{proc.port}/\?token=[0-9a-f]{{48}}", proc.url), proc.url
        guess = "0" * 48
        assert proc.request("GET", "/", auth=False)[0] == 403
        assert proc.request("GET", f"/?token={guess}", auth=False)[0] == 403
        assert proc.post_json("/get_info", {}, auth=False)[0] == 403
        status, headers, _ = proc.request("GET", f"/?token={proc.token}&layout=default", auth=False)
        assert status == 303 and headers["location"] == "/?layout=default"
        cookie = headers["set-cookie"].split(";", 1)[0]
        assert proc.request("GET", "/", headers={"Cookie": cookie}, auth=False)[0] == 200
        status, _, body = proc.post_json("/get_info", {})  # scripts: Authorization: token ...
        assert status == 200 and "smollm2" in json.loads(body)["models"]
        assert proc.post_json(f"/get_info?token={proc.token}", {}, auth=False)[0] == 200
        assert proc.request("GET", "/get_info;x")[0] == 400
        # One local process opens 100 connections (half idle, half stalled mid-headers); the page's
        # requests still get through (idle connections give their slots to new ones).
        flood = [socket.create_connection(("127.0.0.1", proc.port), timeout=30) for _ in range(100)]
        for i, sock in enumerate(flood):
            if i % 2:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert proc.request("GET", "/", headers={"Cookie": cookie}, auth=False)[0] == 200
        assert proc.post_json("/get_info", {})[0] == 200
        # The flood's connections are closed by the server (evicted, or at the header deadline).
        for sock in flood:
            try:
                assert sock.recv(100) == b""
            except ConnectionResetError:
                pass
            sock.close()
        proc.stop()
        log = proc.log_path.read_text()
    ready = [line for line in log.splitlines() if "is ready:" in line]
    assert len(ready) == 1 and proc.token in ready[0]  # printed once, as Jupyter prints its URL
    rest = log.replace(ready[0], "")
    assert proc.token not in rest and guess not in rest and cookie.split("=", 1)[1] not in rest
    assert "GET /?token=[redacted]" in rest and f"token=[redacted]&layout=default" in rest


def test_no_token_is_an_explicit_opt_out_with_a_warning(tmp_path):
    with ServerProcess(["--no_token"], tmp_path) as proc:
        assert proc.url == f"http://127.0.0.1:{proc.port}/" and proc.token is None and proc.headers == {}
        ready = [line for line in proc.log_tail().splitlines() if "is ready:" in line][0]
        assert "WARNING: --no_token" in ready
        assert proc.post_json("/get_info", {})[0] == 200


# ---------------------------------------------------------------------------
# The notebook widget: the same rules on its own server.


def test_notebook_widget_applies_the_host_and_origin_rules(shared, tmp_path):
    from lit_app import notebook  # pylint: disable=import-outside-toplevel

    root = client_build.build_client_root(str(tmp_path / "root"), bundle_path=str(tmp_path / "none.js"))
    widget = notebook.LitWidget(model_group.lit_models(shared, MODEL), datasets.get_datasets(), client_root=root)
    try:
        port, json_ = widget.port, {"Content-Type": "application/json", **widget.headers}
        assert re.fullmatch(r"[0-9a-f]{48}", widget.token)
        assert widget.base_url == f"http://localhost:{port}/" and widget.url == f"{widget.base_url}?token={widget.token}"
        assert widget.headers == {"Authorization": f"token {widget.token}"}
        # Another local process without the token is refused; the page load with ?token= sets the cookie.
        status, _, body = _request(port, "POST", "/get_info", "{}", {"Content-Type": "application/json"})
        assert status == 403 and "token" in body
        status, headers, _ = _request(port, "GET", f"/?token={widget.token}", headers={"Host": f"localhost:{port}"})
        assert status == 303 and "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
        status, headers, body = _request(port, "POST", "/get_info", "{}", json_)
        assert status == 200 and TOK in json.loads(body)["models"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        for extra in ({"Host": f"evil.example:{port}"}, {"Origin": "http://evil.example"},
                      {"Sec-Fetch-Site": "cross-site"}, {"Content-Type": "text/plain"}):
            status, _, body = _request(port, "POST", "/get_info", "{}", {**json_, **extra})
            assert status == 403 and "\n" not in body, (extra, body)
        assert _request(port, "GET", "/", headers={"Host": f"localhost:{port}", **widget.headers})[0] == 200
        body = json.dumps({"inputs": [{"id": "x", "data": {"prompt": "hi"}}]})
        status, _, answer = _request(port, "POST", f"/get_preds?model={TOK}", body,
                                     {**json_, "Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"})
        assert status == 200 and json.loads(answer)[0][fields.TOKENS]
        assert widget.ui_state.primary is None  # LIT's UI-state tracking is on: nothing pushed yet
        # render() puts the token into the iframe's URL (LIT's own HTML, captured from IPython's display).
        from IPython import display  # pylint: disable=import-outside-toplevel
        shown = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(display, "display", lambda obj: shown.append(obj.data))
            widget.render(ui_params=None, data=[{"prompt": "hi"}])
        assert len(shown) == 1 and f"&token={widget.token}'" in shown[0] and "data0_prompt=hi" in shown[0]
    finally:
        widget.stop()
    with pytest.raises(OSError):
        _request(port, "GET", "/")


# ---------------------------------------------------------------------------
# Spellings of API paths (the route LIT runs decides; non-canonical spellings are refused).


@pytest.mark.parametrize("spelled", ["/get_info;x", "/get_info/", "/get%5Finfo", "/get_info%3Bx", "/x/../get_info",
                                     "/load_datapoints;x", "/save_datapoints;", "/create_dataset;a=b"])
def test_api_paths_in_other_spellings_are_refused(client, spelled):
    assert "canonical" in one_line_error(get(client, spelled, headers={"Sec-Fetch-Site": "cross-site"}), 400)
    outside = "/tmp/ss_spelling_should_not_exist"
    r = post(client, f"{spelled}?dataset_name=case_studies&path={outside}",
             {"inputs": [], "config": {"new_name": "x", "path": "/etc/passwd"}})
    assert "canonical" in one_line_error(r, 400)
    big = {"inputs": [{"id": "a", "data": {"prompt": "x" * 120_000}}]}
    assert one_line_error(post(client, spelled, big, ctype="text/plain"), 400)
    assert not os.path.exists(outside + ".lit.jsonl")


# ---------------------------------------------------------------------------
# 4xx for the client's mistakes, 5xx only for server faults.

EXPLAIN_MODEL = f"_{MODEL}_explain"
COMPARE_MODEL = f"_{MODEL}_compare"


@pytest.mark.parametrize("model,data,needle", [
    (SAL, {"prompt": "hi", "detail": "everything"}, '"detail"'),
    (SAL, {"prompt": "hi", "detail": "x" * 5000}, '"detail"'),
    (EXPLAIN_MODEL, {"prompt": "hi", "target": " x", "steps": -1}, '"steps"'),
    (EXPLAIN_MODEL, {"prompt": "hi", "target": " x", "steps": 100000}, '"steps"'),
    (EXPLAIN_MODEL, {"prompt": "hi", "target": " x", "steps": "abc"}, '"steps"'),
    (EXPLAIN_MODEL, {"prompt": "hi", "target": " x", "steps": "3.5"}, '"steps"'),  # int("3.0") was a 500; "3.0"
    # is 3 now, as for every number rule (sequence_salience/field_rules.py), and a fraction is refused
    (EXPLAIN_MODEL, {"prompt": "hi", "target": " x", "explain_action": "ig_auto", "ig_tolerance": -1},
     '"ig_tolerance"'),
    (EXPLAIN_MODEL, {"prompt": "hi", "target": " x", "explain_action": "ig_auto", "ig_tolerance": "abc"},
     '"ig_tolerance"'),
    (EXPLAIN_MODEL, {"prompt": "hi", "target": " x", "explain_action": "nope"}, '"explain_action"'),
    (COMPARE_MODEL, {"prompt": "hi", "pinned_prompt": "hello", "old_answer": "yes"}, '"old_answer"'),
    (COMPARE_MODEL, {"prompt": "hi", "pinned_prompt": "hello", "with_pinned_salience": 3}, '"with_pinned_salience"'),
], ids=["detail", "detail-long", "steps-neg", "steps-huge", "steps-abc", "steps-float-str", "tol-neg", "tol-abc",
        "action", "old-answer-str", "with-pinned-int"])
def test_bad_fields_are_400_before_any_work(client, model, data, needle):
    msg = one_line_error(preds(client, model, data), 400)
    # "inputs[0]: field ..." is the edge's own check (limits.validate_example), before LIT or the model.
    assert msg.startswith(f"inputs[0]: field {needle}") and "use" in msg and len(msg) < 300, msg


def test_the_pinned_datapoints_texts_are_checked_at_the_edge_like_the_selected_ones(client):
    msg = one_line_error(preds(client, COMPARE_MODEL, {"prompt": "hi", "pinned_prompt": 5}), 400)
    assert msg.startswith('inputs[0]: field "pinned_prompt" must be a string'), msg
    long = {"prompt": "hi", "pinned_prompt": "x" * 120_000}
    msg = one_line_error(preds(client, COMPARE_MODEL, long), 400)
    assert msg.startswith("inputs[0]: pinned_prompt + pinned_system + pinned_target is 120,000 characters"), msg
    assert "--max_prompt_chars" in msg


def test_wrapper_request_errors_are_400_at_the_edge(client):
    # Found by the wrapper itself (not by the edge's field checks): still the client's mistake.
    r = preds(client, SAL, {"prompt": "What is 2+2?", "target": " 4", "target_span": "5:9"})
    assert '"target_span"' in one_line_error(r, 400)


@pytest.mark.parametrize("body,needle", [
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
    (b'{"inputs": ' + b"[" * 65 + b"]" * 65 + b"}", "nests deeper"),
    (b'{"inputs": [{"id": "a", "data": {"prompt": "hi", "ig_steps": ' + b"9" * 5000 + b"}}]}", "number of 5,000"),
    (b'{"inputs": [{"id": "a", "data": {"prompt": "hi", "ig_steps": 1.' + b"5" * 5000 + b"}}]}", "number of"),
    (b'{"inputs": [{"id": "a", "data": {"prompt": "hi", "ig_steps": NaN}}]}', "NaN"),
    (b'{"inputs": [{"id": "a", "data": {"prompt": "hi", "ig_steps": -Infinity}}]}', "Infinity"),
], ids=["deep-100000", "deep-66", "int-5000-digits", "float-5000-digits", "nan", "infinity"])
def test_json_parser_limits_are_400(client, body, needle):
    assert needle in one_line_error(post(client, f"/get_preds?model={SAL}", body), 400)


def test_unknown_example_ids_are_400(client):
    r = post(client, f"/get_preds?model={TOK}&dataset_name=case_studies", {"inputs": ["no-such-id"]})
    assert "no-such-id" in one_line_error(r, 400) and "case_studies" in one_line_error(r, 400)
    r = post(client, f"/get_preds?model={TOK}&dataset_name=case_studies",
             {"inputs": [{"id": "v", "data": {"prompt": "hi"}}]})
    assert '"_id"' in one_line_error(r, 400)  # LIT: "malformed example with inconsistent ids" (500)
    ok = {"inputs": [{"id": "v", "data": {"prompt": "hi", "_id": "v"}, "meta": {}}]}
    assert post(client, f"/get_preds?model={TOK}&dataset_name=case_studies", ok).status_code == 200


def test_lit_parameter_errors_are_400(client):
    for path in ("/get_dataset", "/annotate_new_data", "/fetch_new_data"):
        assert "Must provide" in one_line_error(post(client, path, {"inputs": []}), 400)


def test_error_bodies_name_no_server_path(lit, data_dirs):
    data, _ = data_dirs
    c = secure(lit, data_dir=str(data))
    r = post(c, "/load_datapoints?dataset_name=case_studies&path=missing/none.jsonl", {"inputs": []})
    text = r.get_data(as_text=True)
    assert r.status_code in (400, 404, 500) and "\n" not in text, text
    assert str(data) not in text and str(data.parent) not in text, text
    assert "missing/none.jsonl" in text or "<server path>" in text, text
