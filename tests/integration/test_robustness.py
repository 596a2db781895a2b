"""Robustness of the server on the embedded default model: user regexes, the tokenizer lock,
cancellation of blocking requests.

In-process tests send real WSGI requests to the same LIT app the server runs (werkzeug's test
client, through `security.SecureApp`); tests that need a real socket start
`python -m lit_app.server` and talk HTTP to it. Nothing asserts wall-clock time: ordering is
checked (a request answers while another is still running).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import signal
import subprocess
import threading
import time

import pytest
from werkzeug.test import Client

import sequence_salience as ss
from lit_app.edge import clients, security, security_config
from lit_app.schema import fields
from tests.server_process import ServerProcess
from tests.unit.waiting import wait_until

PORT = 5432
HOST = f"127.0.0.1:{PORT}"
MODEL = "smollm2"
GEN, SAL, TOK = fields.model_group_names(MODEL)
EXPLAIN = f"_{MODEL}_explain"
QUESTION = "What is the capital of France?"
# A blocking request that takes many chunks (targets x IG steps, 8 steps a chunk) and the
# same pair without IG, one chunk; either takes far longer than tokenizing a prompt.
LONG_PROMPT = ("Read the notes. Parcel one left the depot at nine by van. Parcel two left at ten by bike."
               " Which parcel left first?")
LONG_TARGET = " Parcel one left first."
LONG_IG_STEPS = 16


@pytest.fixture(scope="module")
def shared(make_shared):
    return make_shared(max_new_tokens=8)


def _client(lit) -> Client:
    return Client(security.SecureApp(lit, security_config.SecurityConfig(port=PORT)), use_cookies=False)


# The requests of this file come from one page (lit_app/edge/clients.py): its newer selection supersedes its older work.
PAGE = "page"


def _post(client, model, data):
    body = json.dumps({"inputs": [{"id": "r", "data": data}]})
    return client.post(f"/get_preds?model={model}", data=body, content_type="application/json",
                       headers={"Host": HOST, clients.CLIENT_HEADER: PAGE})


def _wait_for(condition, what: str, limit_s: float = 600):
    """Polls `condition` (a failure bound, not a timing assertion)."""
    wait_until(condition, what, guard_s=limit_s, poll_s=0.02)


def _blocking_started(caplog) -> bool:
    return any("Blocking salience request" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------
# The real server (a socket to close, a worker thread to keep).


@pytest.fixture(scope="module")
def real_server(lit_server):
    """`python -m lit_app.server` on loopback with its token: the session's (tests/conftest.py `lit_server`).
    These tests send requests with a target (nothing is generated) and read the log from where they start."""
    return lit_server


def test_the_real_server_publishes_the_method_registry_in_the_salience_spec(real_server):
    """Contract 2 of docs/architecture.md ("Method registry"): LIT's /get_info carries the core registry
    plus the LIT facts as the `default` of the salience model's `method_registry` output field."""
    status, _, body = real_server.post_json("/get_info", {})
    assert status == 200, body
    field = json.loads(body)["models"][SAL]["spec"]["output"][fields.METHOD_REGISTRY]
    assert field["__name__"] == "ListLitType"  # a type LIT's client knows and revives with its default
    core = ss.registry_json(kinds=("token", "segment"))  # both kinds: the module lists the segment methods too
    assert [e["name"] for e in field["default"]] == [e["name"] for e in core]
    wire = {"integrated_gradients": ("ig", "ig_matrix", 256), "smooth_grad": ("sg", "smooth_grad_matrix", 256),
            "ablation_surrogate": (None, None, 256)}
    for got, want in zip(field["default"], core):
        assert {k: got[k] for k in want} == want
        assert (got["tag"], got["matrix_detail"], got["max_count"]) == wire.get(want["name"], (None, None, None))


def _send(server: ServerProcess, model: str, data: dict) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    conn.request("POST", f"/get_preds?model={model}", body=json.dumps({"inputs": [{"id": "r", "data": data}]}),
                 headers={"Content-Type": "application/json", **server.headers})
    return conn


def _http(server: ServerProcess, model: str, data: dict) -> tuple[int, str]:
    status, _, body = server.post_json(f"/get_preds?model={model}", {"inputs": [{"id": "r", "data": data}]})
    return status, body


# ---------------------------------------------------------------------------
# User regexes are matched with a time limit.


def test_a_catastrophic_regex_is_stopped_and_the_server_keeps_serving(real_server):
    pattern = "(a|a)+$"
    bad = {fields.PROMPT: "Say " + "a" * 60 + "!", fields.TARGET: " a", "explain_action": "curves",
           "granularity": "regex", "pattern": pattern, "steps": 2}
    status, body = _http(real_server, EXPLAIN, bad)
    assert status == 400 and "\n" not in body, body  # the user's pattern: the client's mistake, not a fault
    assert pattern in body and "simplify the pattern" in body, body
    # The model lock and the worker were released: the same test with a sane pattern runs.
    status, body = _http(real_server, EXPLAIN, {**bad, "pattern": "[^ ]+"})
    assert status == 200, body
    assert json.loads(body)[0]["explain"]["granularity"] == "regex"
    status, body = _http(real_server, TOK, {fields.PROMPT: QUESTION})
    assert status == 200 and "capital" in body


# ---------------------------------------------------------------------------
# Tokenization does not wait for the model.


def test_a_tokens_request_answers_while_a_blocking_computation_holds_the_model(lit, shared, caplog):
    caplog.set_level(logging.INFO, logger="lit_app.model.salience_runs")
    long_answer: dict = {}

    def long_request():
        long_answer["r"] = _post(_client(lit), SAL, {fields.PROMPT: LONG_PROMPT, fields.TARGET: LONG_TARGET})

    t = threading.Thread(target=long_request)
    t.start()
    try:
        _wait_for(lambda: _blocking_started(caplog) and shared.lock.locked(), "the blocking computation start")
        r = _post(_client(lit), TOK, {fields.PROMPT: QUESTION, fields.TARGET: " Paris."})
        long_still_running = t.is_alive() and shared.lock.locked()
    finally:
        t.join()
    assert r.status_code == 200, r.get_data(as_text=True)
    tokens = json.loads(r.data)[0][fields.TOKENS]
    assert "Paris" in "".join(tokens) and any("capital" in tok for tok in tokens)
    assert long_still_running, "the tokens request waited for the salience computation"
    assert long_answer["r"].status_code == 200, long_answer["r"].get_data(as_text=True)


def test_the_tokenizer_copy_gives_the_same_tokens_as_the_model(shared, default_lm):
    chat = shared.format_prompt({fields.PROMPT: QUESTION})
    plain = default_lm.format_prompt(QUESTION)
    # The same text, spans and template flag; the copy's prompt also carries the row's budget (none here).
    assert (chat.text, chat.role_spans, chat.templated) == (plain.text, plain.role_spans, plain.templated)
    assert chat.max_new_tokens is None
    assert shared.prompts.lock is not shared.lock
    ids = default_lm.encode_prompt(chat).ids
    assert len(shared.tokens(chat, "")) == len(ids)


# ---------------------------------------------------------------------------
# Blocking requests stop when nobody waits for them any more.


def test_a_blocking_request_stops_when_another_datapoint_is_selected(lit, shared, caplog):
    caplog.set_level(logging.INFO, logger="lit_app.model.salience_runs")
    caplog.clear()
    long_answer: dict = {}
    long_data = {fields.PROMPT: LONG_PROMPT, fields.TARGET: LONG_TARGET, fields.IG_STEPS: LONG_IG_STEPS}

    def long_request():
        long_answer["r"] = _post(_client(lit), SAL, long_data)

    t = threading.Thread(target=long_request)
    t.start()
    try:
        _wait_for(lambda: _blocking_started(caplog) and shared.lock.locked(), "the blocking computation start")
        # The user selects another datapoint: the module asks for its first highlight.
        r = _post(_client(lit), SAL, {fields.PROMPT: QUESTION, fields.TARGET: " Paris.", "detail": "span"})
    finally:
        t.join()
    assert r.status_code == 200, r.get_data(as_text=True)
    long = long_answer["r"]
    assert long.status_code == 409  # cancelled by a newer request: neither a mistake nor a fault
    message = long.get_data(as_text=True)
    assert message.startswith("Cancelled: another datapoint was selected") and "\n" not in message
    # Nothing half-computed was cached: the same request computes it from the start.
    long_chat = shared.format_prompt(long_data)
    assert shared.cached_salience(long_chat, LONG_TARGET, {fields.IG_STEPS: LONG_IG_STEPS}) is None


def test_concurrent_blocking_requests_do_not_stop_each_other(lit):
    prompts = [f"Name a fruit that starts with the letter {c}." for c in "AB"]
    answers: dict = {}
    threads = [threading.Thread(target=lambda p=p: answers.setdefault(p, _post(_client(lit), SAL, {
        fields.PROMPT: p, fields.TARGET: " Apple."}))) for p in prompts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for p in prompts:
        assert answers[p].status_code == 200, answers[p].get_data(as_text=True)


def test_a_blocking_request_stops_when_its_client_disconnects(real_server):
    log = real_server.log_path
    start = len(log.read_text())

    def new_log() -> str:
        return log.read_text()[start:]

    # The server's lines about this request end with "(prompt 'Read the notes. Parcel one …')": another test's
    # request on the session's server may start, finish or stop meanwhile.
    own = r".*\(prompt " + re.escape(repr(LONG_PROMPT[:20])[:-1])
    conn = _send(real_server, SAL, {fields.PROMPT: LONG_PROMPT, fields.TARGET: LONG_TARGET, fields.IG_STEPS: LONG_IG_STEPS})
    try:
        _wait_for(lambda: re.search("Blocking salience request" + own, new_log()), "the blocking computation start")
    finally:
        conn.close()  # the client goes away without reading the answer
        closed = time.monotonic()
    _wait_for(lambda: re.search("Cancelled: the client disconnected" + own, new_log()), "the cancellation in the server log")
    print(f"\ndisconnect to free, blocking request: cancelled {time.monotonic() - closed:.2f} s after the close")
    # It stopped part-way: IG never reached its last chunk (done == total; the log's progress lines, every 2 s
    # and at the end, name the prompt as the lines above do).
    assert not re.search(r"salience integrated_gradients: (\d+)/\1\b" + own, new_log()), new_log()[-2000:]
    status, body = _http(real_server, TOK, {fields.PROMPT: QUESTION})
    assert status == 200 and "capital" in body
    # One line in the log, not LIT's "Uncaught error" with a traceback (checked after a later request).
    assert "Traceback" not in new_log()


# ---------------------------------------------------------------------------
# Ctrl-C stops the server mid-computation. The tests below own their server process: they send it a
# signal (SIGINT, SIGUSR1, SIGTERM) and watch it exit or keep serving.


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    """One server process of this module's own for the SIGUSR1 test, which leaves it serving, then the Ctrl-C
    test, which stops it (a server's start costs seconds of CPU; the file's order runs them so)."""
    with ServerProcess(["--max_new_tokens", "8"], tmp_path_factory.mktemp("own_server")) as proc:
        yield proc


def _answer(conn: http.client.HTTPConnection) -> tuple[int, str] | None:
    """(status, body) of the answer to the request sent on `conn`; None when the server closed it unanswered."""
    try:
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    except (http.client.HTTPException, ConnectionError):
        return None


def _exit_code(proc: ServerProcess, timeout_s: float) -> int:
    """The server's exit code; if it is still running after `timeout_s`, a failure with every thread's
    stack (the server prints them on SIGUSR1) and the log's end."""
    try:
        return proc.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        raise AssertionError(f"the server did not exit {timeout_s:.0f} s after the signal:\n{proc.log_tail(12000)}")


def test_sigusr1_prints_every_thread_and_the_server_keeps_serving(own_server):
    proc = own_server
    proc.proc.send_signal(signal.SIGUSR1)
    _wait_for(lambda: "serve_forever" in proc.log_path.read_text() or proc.proc.poll() is not None,
              "the stack dump", limit_s=60)
    assert proc.proc.poll() is None, f"SIGUSR1 ended the server: {proc.log_tail()}"
    log = proc.log_path.read_text()
    # faulthandler's format: one "Thread 0x..." block per thread, the main one serving requests.
    assert len(re.findall(r"^(?:Current thread|Thread) 0x[0-9a-f]+", log, re.M)) >= 2, log[-3000:]
    status, _, body = proc.request("GET", "/")
    assert status == 200, body[:300]
    assert proc.proc.poll() is None


def test_ctrl_c_stops_the_server_mid_computation(own_server):
    proc = own_server
    conn = _send(proc, SAL, {fields.PROMPT: LONG_PROMPT, fields.TARGET: LONG_TARGET, fields.IG_STEPS: 64})
    try:
        _wait_for(lambda: "Blocking salience request" in proc.log_path.read_text(), "the blocking computation")
        sent = time.monotonic()
        proc.proc.send_signal(signal.SIGINT)
        code = _exit_code(proc, timeout_s=60)  # a failure bound; the time taken is printed, not asserted
        took = time.monotonic() - sent
        answer = _answer(conn)
    finally:
        conn.close()
    log = proc.log_path.read_text()
    print(f"\nCtrl-C to exit: {took:.2f} s (exit code {code}); the request in flight: {answer}")
    assert code == 0, log[-3000:]
    # The request in flight is answered 503 (stopped by the server) or its connection closed unanswered (not
    # waited for), never "200 []" as if it had succeeded with nothing (issue 43).
    assert answer is None or (answer[0] == 503 and "server is stopping" in answer[1]), answer
    assert "Stopping (1 request(s) running)" in log, log[-3000:]
    # Cancelled at its next check, or (inside one long chunk: the whole gradient matrix is one) not
    # waited for after server.SHUTDOWN_GRACE_S; either way a clean exit, no abort inside torch.
    assert re.search(r"Stopped after \d+\.\d s", log), log[-3000:]
    assert "Traceback" not in log and "terminate called" not in log, log[-3000:]


def test_a_server_started_with_sigint_ignored_says_how_to_stop_it_and_stops_on_sigterm(tmp_path):
    with ServerProcess(["--max_new_tokens", "4"], tmp_path, sigint_ignored=True) as proc:
        assert f"Fix: stop it with `kill {proc.proc.pid}`" in proc.log_path.read_text(), proc.log_tail()
        proc.proc.send_signal(signal.SIGTERM)
        code = _exit_code(proc, timeout_s=60)
        log = proc.log_path.read_text()
    assert code == 0, log[-3000:]
    assert "Stopping (0 request(s) running)" in log and re.search(r"Stopped after \d+\.\d s", log), log[-3000:]
