"""Request limits and the pieces of lit_app/edge/security.py that need no model: hosts, bodies,
path confinement, compute slots, error messages, and the connection-bounded HTTP server."""

from __future__ import annotations

import io
import os
import platform
import socket
import threading
import time

import pytest

from lit_app import errors, memory
from lit_app.edge import hosts, http_server, limits, paths, request_body, security
from lit_app.schema import inputs
from lit_app.errors import Rejected
from lit_app.edge.limits import Limits


@pytest.mark.parametrize("value,expected", [
    ("localhost:5432", ("localhost", 5432)),
    ("LocalHost.:80", ("localhost", 80)),
    ("127.0.0.1", ("127.0.0.1", 8080)),
    ("[::1]:5432", ("::1", 5432)),
    ("[::1]", ("::1", 8080)),
    ("::1", ("::1", 8080)),
    ("lab.example:65535", ("lab.example", 65535)),
    ("", None), ("[::1", None), ("[::1]x", None), ("host:0", None), ("host:70000", None), ("host:p", None),
    ("a b:1", None), ("user@host:1", None), ("host/x:1", None),
])
def test_parse_host(value, expected):
    assert hosts.parse_host(value, 8080) == expected


@pytest.mark.parametrize("host,loopback,wildcard", [
    ("127.0.0.1", True, False), ("127.9.9.9", True, False), ("localhost", True, False), ("::1", True, False),
    ("[::1]", True, False), ("0.0.0.0", False, True), ("::", False, True), ("10.0.0.1", False, False),
    ("lab.example", False, False),
])
def test_loopback_and_wildcard(host, loopback, wildcard):
    assert hosts.is_loopback(host) is loopback and hosts.is_wildcard(host) is wildcard


def _environ(body: bytes, length: str | None, chunked: bool = False) -> dict:
    env = {"wsgi.input": io.BytesIO(body)}
    if length is not None:
        env["CONTENT_LENGTH"] = length
    if chunked:
        env["wsgi.input_terminated"] = True
    return env


def test_read_body_within_and_beyond_the_limit():
    env = _environ(b'{"a": 1}', "8")
    assert request_body.read_body(env, 8) == b'{"a": 1}'
    assert env["wsgi.input"].read() == b'{"a": 1}' and env["CONTENT_LENGTH"] == "8"  # LIT reads it again
    with pytest.raises(Rejected) as e:
        request_body.read_body(_environ(b"x" * 9, "9"), 8)
    assert e.value.status == 413 and "9 bytes" in e.value.message
    assert request_body.read_body(_environ(b"x" * 8, None, chunked=True), 8) == b"x" * 8
    with pytest.raises(Rejected) as e:
        request_body.read_body(_environ(b"x" * 9, None, chunked=True), 8)
    assert e.value.status == 413
    assert request_body.read_body(_environ(b"ignored", None), 8) == b""  # no length, not chunked: no body


@pytest.mark.parametrize("length,status", [("abc", 400), ("-1", 400), ("10", 400)])
def test_read_body_bad_lengths(length, status):
    with pytest.raises(Rejected) as e:
        request_body.read_body(_environ(b"short", length), 100)
    assert e.value.status == status


def test_read_body_stalled_client_is_408():
    class Stalled:
        def read(self, n):
            raise TimeoutError("timed out")

    with pytest.raises(Rejected) as e:
        request_body.read_body({"wsgi.input": Stalled(), "CONTENT_LENGTH": "5"}, 100)
    assert e.value.status == 408


@pytest.mark.parametrize("body,ok", [(b"", True), (b"  ", True), (b'{"x": [1]}', True), (b"{", False),
                                     ('{"a": "é"}'.encode("utf-16"), False), (b"\xff", False)])
def test_parse_json(body, ok):
    if ok:
        request_body.parse_json(body)
    else:
        with pytest.raises(Rejected) as e:
            request_body.parse_json(body)
        assert e.value.status == 400


@pytest.mark.parametrize("value,expected", [(3, 3), (3.0, 3), ("3", 3), (" 4 ", 4), ("4.0", 4), (True, None),
                                            (1.5, None), ("x", None), (None, None), ([1], None)])
def test_whole_number(value, expected):
    assert inputs.whole_number(value) == expected


def test_prompt_chars_count_prompt_system_and_target_together():
    lim = Limits(max_prompt_chars=10)
    limits.validate_example({"prompt": "12345", "system": "123", "target": "12"}, lim, "x")
    with pytest.raises(Rejected, match="11 characters"):
        limits.validate_example({"prompt": "12345", "system": "123", "target": "123"}, lim, "x")


def test_polls_are_recognised_only_when_every_input_polls():
    poll = {"id": "a", "data": {"prompt": "p", "detail": "poll"}}
    span = {"id": "b", "data": {"prompt": "p", "detail": "span"}}
    assert limits.is_poll("/get_preds", {"inputs": [poll, poll]})
    assert not limits.is_poll("/get_preds", {"inputs": [poll, span]})
    assert not limits.is_poll("/get_preds", {"inputs": []})
    assert not limits.is_poll("/get_metrics", {"inputs": [poll]})
    status = {"id": "c", "data": {"prompt": "p", "explain_action": "status"}}
    cancel = {"id": "d", "data": {"prompt": "p", "explain_action": "cancel"}}
    curves = {"id": "e", "data": {"prompt": "p", "explain_action": "curves"}}
    assert limits.is_poll("/get_preds", {"inputs": [status, cancel, poll]})
    assert not limits.is_poll("/get_preds", {"inputs": [curves]})


def test_compute_slots_never_exceed_capacity_under_contention():
    slots = limits.ComputeSlots(3)
    barrier = threading.Barrier(20)
    got = []

    def worker():
        barrier.wait()
        got.append(slots.try_acquire())

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got.count(True) == 3 and slots.in_use == 3 and slots.rejected == 17
    for _ in range(3):
        slots.release()
    with pytest.raises(RuntimeError):
        slots.release()
    err = slots.busy_error(2)
    assert err.status == 503 and ("Retry-After", "2") in err.headers


def test_path_confiner(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "out"
    root.mkdir()
    outside.mkdir()
    (root / "sub").mkdir()
    os.symlink(outside, root / "link")
    os.symlink(root / "sub", root / "inner_link")
    os.symlink(outside / "x.lit.jsonl", root / "f.lit.jsonl")
    confiner = paths.PathConfiner(str(root))
    real = os.path.realpath(root)
    assert confiner.resolve("a.jsonl") == os.path.join(real, "a.jsonl")
    assert confiner.resolve("sub/a") == os.path.join(real, "sub", "a")
    assert confiner.resolve(str(root / "sub" / "a")) == os.path.join(real, "sub", "a")
    assert confiner.resolve("inner_link/a") == os.path.join(real, "sub", "a")  # a symlink that stays inside
    for bad in ("../x", "sub/../../x", "sub/..", "..\\x", "/etc/passwd", str(outside / "a"), "link/a", "link", "f",
                "a\x00b"):
        with pytest.raises(Rejected) as e:
            confiner.resolve(bad)
        assert e.value.status == 403, bad
    with pytest.raises(Rejected):
        confiner.resolve("")


@pytest.mark.parametrize("body,message", [
    ("Uncaught error: bad thing\n\nDetails: Traceback (most recent call last):\n  File \"x\"", "bad thing"),
    ("Uncaught error: 'nope'\n\nDetails: Traceback", "Unknown or missing name 'nope' in the request. Fix: use a"
     " name that /get_info lists (models, datasets, generators, interpreters, metrics)."),
    ("Uncaught error: two\nlines\n\nDetails: tb", "two lines"),
    ("Not found", "Not found"),
    ("", "The server failed without a message"),
])
def test_lit_error_messages_become_one_line(body, message):
    got, details = security.lit_error_message(body)
    assert got == message and "\n" not in got
    assert ("Traceback" in details) == ("Traceback" in body)


def test_one_line_truncates():
    assert errors.one_line("a\n b\r\nc") == "a b c"
    assert len(errors.one_line("x" * 2000)) == 600


# ---------------------------------------------------------------------------
# The connection-bounded server, on a real socket.


def _send(port: int, path: str = "/") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
    return s


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    s.close()
    return data


def test_bounded_server_answers_503_beyond_max_connections():
    release = threading.Event()
    entered = threading.Semaphore(0)

    def app(environ, start_response):
        entered.release()
        release.wait(30)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    httpd = http_server.make_server("127.0.0.1", 0, app, max_connections=2, max_per_client=2)
    port = httpd.server_address[1]
    serve = threading.Thread(target=httpd.serve_forever, daemon=True)
    serve.start()
    try:
        held = [_send(port), _send(port)]
        assert entered.acquire(timeout=30) and entered.acquire(timeout=30)  # both are inside the app
        refused = _read_all(_send(port))
        head, _, body = refused.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in head
        assert b"--max_connections" in body and b"\n" not in body
        release.set()
        for s in held:
            assert _read_all(s).endswith(b"ok")
        deadline = time.monotonic() + 10
        while httpd.active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert httpd.active == 0 and httpd.refused == 1
        assert _read_all(_send(port)).endswith(b"ok")  # the slots came back
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def _taken_port() -> socket.socket:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


def test_a_port_in_use_raises_cannot_listen_and_werkzeug_prints_nothing(capsys):
    """werkzeug answers a failed bind itself (prints 'Port N is in use ... a different port.', exits 1), so the
    server's own message, which names --port, was never reached; make_server now raises CannotListen instead."""
    taken = _taken_port()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(http_server.CannotListen) as failed:
            http_server.make_server("127.0.0.1", port, lambda environ, start_response: [], max_connections=2)
    finally:
        taken.close()
    assert failed.value.in_use and failed.value.port == port
    assert capsys.readouterr().err == ""


def test_a_port_in_use_is_one_log_line_naming_the_port_and_the_flag_and_exit_status_1(capsys, caplog):
    """What the user of `python -m lit_app.server --port N` sees when N is taken: one line in our style
    (cause, then the fix naming --port), exit status 1 (StartFailed), nothing else on stderr, no traceback."""
    import argparse  # pylint: disable=import-outside-toplevel
    from lit_app import server  # pylint: disable=import-outside-toplevel
    from lit_app.edge import security_config  # pylint: disable=import-outside-toplevel

    taken = _taken_port()
    port = taken.getsockname()[1]
    args = argparse.Namespace(host="127.0.0.1", port=port)
    sec = security_config.SecurityConfig(port=port)
    try:
        with pytest.raises(server.StartFailed) as failed:
            server.listen(args, lambda environ, start_response: [], sec)
    finally:
        taken.close()
    assert failed.value.status == 1
    assert capsys.readouterr().err == ""
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert f"port {port} is in use by another program" in line
    assert "Fix: pass another --port" in line


def test_malloc_arena_cap_defers_to_the_users_setting(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.cap_malloc_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    if platform.libc_ver()[0] == "glibc":
        assert memory.cap_malloc_arenas(4) is True  # glibc accepts M_ARENA_MAX


def _serve(app, **kw):
    httpd = http_server.make_server("127.0.0.1", 0, app, **kw)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


def _ok_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def test_a_connection_without_headers_is_closed_after_the_header_timeout():
    httpd, port = _serve(_ok_app, max_connections=4, header_timeout_s=0.5)
    try:
        idle = socket.create_connection(("127.0.0.1", port), timeout=30)
        idle.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # headers never finished (slowloris)
        assert idle.recv(100) == b""  # closed by the server (a failure bound of 30 s, not a timing claim)
        idle.close()
        assert httpd.evicted == 1
        assert _read_all(_send(port)).endswith(b"ok")
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_idle_connections_give_their_slots_to_new_ones():
    # Header timeout long: only the eviction on a full server frees the slots here.
    httpd, port = _serve(_ok_app, max_connections=4, max_per_client=4, header_timeout_s=600)
    try:
        idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(10)]
        deadline = time.monotonic() + 30
        while httpd.evicted < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert httpd.active <= 4 and httpd.evicted >= 6
        for _ in range(3):  # a real request always gets a slot: an idle one is closed for it
            assert _read_all(_send(port)).endswith(b"ok")
        assert httpd.refused == 0
        for s in idle:
            s.close()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_one_client_address_cannot_hold_every_slot():
    release = threading.Event()

    def slow(environ, start_response):
        release.wait(30)
        return _ok_app(environ, start_response)

    httpd, port = _serve(slow, max_connections=4)  # default: 2 per client address
    assert httpd.max_per_client == 2
    try:
        busy = [_send(port) for _ in range(2)]
        deadline = time.monotonic() + 30
        while httpd.serving < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        head = _read_all(_send(port)).split(b"\r\n", 1)[0]
        assert head.startswith(b"HTTP/1.1 503")  # a third from this address, while two slots stay free
        assert httpd.active == 2 and httpd.refused == 1
        release.set()
        for s in busy:
            assert _read_all(s).endswith(b"ok")
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("path,query,data,counted", [
    pytest.param("/get_preds", {"model": "m"}, {"inputs": [{"data": {"prompt": "x"}}]}, True, id="model-request"),
    pytest.param("/get_preds", {"model": "_m_tokenizer"}, {"inputs": [{"data": {"prompt": "x"}}]}, False,
                 id="tokenizer-request"),
    pytest.param("/get_preds", {"model": "m"}, {"inputs": [{"data": {"prompt": "x", "detail": "poll"}}]}, False,
                 id="progress-poll"),
    pytest.param("/get_info", {}, {}, False, id="metadata"),
    pytest.param("/push_ui_state", {}, {"inputs": []}, False, id="ui-state"),
    pytest.param("/get_interpretations", {"model": "_m_tokenizer"}, {"inputs": []}, True,
                 id="interpretations-of-the-tokenizer-model"),
])
def test_only_requests_that_may_wait_for_the_model_take_a_slot(path, query, data, counted):
    assert limits.needs_model(path, query, data, lambda: ["_m_tokenizer"]) is counted


def test_a_server_fault_is_500_with_one_line_and_its_traceback_goes_to_the_log(caplog):
    from werkzeug.test import Client

    from lit_app.edge import security_config

    def lit(environ, start_response):  # a stand-in for LIT's app failing inside a handler
        start_response("500 INTERNAL SERVER ERROR", [("Content-Type", "text/html")])
        return [b"Uncaught error: boom in the model\n\nDetails: Traceback (most recent call last):\n  File \"x\"\n"]

    client = Client(security.SecureApp(lit, security_config.SecurityConfig(port=5432)), use_cookies=False)
    r = client.post("/get_preds?model=m", data='{"inputs": [{"id": "a", "data": {"prompt": "hi"}}]}',
                    headers={"Host": "127.0.0.1:5432", "Content-Type": "application/json"})
    assert r.status_code == 500 and r.get_data(as_text=True) == "boom in the model"
    assert "boom in the model" in caplog.text and "Traceback (most recent call last)" in caplog.text
