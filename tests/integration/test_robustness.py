"""Robustness of the server on the embedded default model: user regexes.

Tests that need a real socket and worker threads start `python -m lit_app.server` and talk
HTTP to it. Nothing asserts wall-clock time.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lit_app import fields

MODEL = "smollm2"
GEN, SAL, TOK = fields.model_group_names(MODEL)
EXPLAIN = f"_{MODEL}_explain"
REPO = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"


def _wait_for(condition, what: str, limit_s: float = 600):
    """Polls `condition` (a failure bound, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.02)


# ---------------------------------------------------------------------------
# The real server (a socket to close, a worker thread to keep).


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    """(port, path of the server's log) of `python -m lit_app.server` on loopback."""
    tmp = tmp_path_factory.mktemp("server")
    port, log = _free_port(), tmp / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lit_app.server", "--port", str(port), "--max_new_tokens", "8",
                                 "--client_root", str(tmp / "client_root")],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: proc.poll() is not None or "is ready:" in log.read_text(), "the server start")
        assert proc.poll() is None, log.read_text()[-3000:]
        yield port, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _send(port: int, model: str, data: dict) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", f"/get_preds?model={model}", body=json.dumps({"inputs": [{"id": "r", "data": data}]}),
                 headers={"Content-Type": "application/json"})
    return conn


def _http(port: int, model: str, data: dict) -> tuple[int, str]:
    conn = _send(port, model, data)
    try:
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8")
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# User regexes are matched with a time limit.


def test_a_catastrophic_regex_is_stopped_and_the_server_keeps_serving(real_server):
    port, _ = real_server
    pattern = "(a|a)+$"
    bad = {fields.PROMPT: "Say " + "a" * 60 + "!", fields.TARGET: " a", "explain_action": "curves",
           "granularity": "regex", "pattern": pattern, "steps": 2}
    status, body = _http(port, EXPLAIN, bad)
    assert status == 500 and "\n" not in body, body
    assert pattern in body and "simplify the pattern" in body, body
    # The model lock and the worker were released: the same test with a sane pattern runs.
    status, body = _http(port, EXPLAIN, {**bad, "pattern": "[^ ]+"})
    assert status == 200, body
    assert json.loads(body)[0]["explain"]["granularity"] == "regex"
    status, body = _http(port, TOK, {fields.PROMPT: QUESTION})
    assert status == 200 and "capital" in body
