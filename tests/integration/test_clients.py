"""Work belongs to a client (issue 43 §2), on the real server (the session's `lit_server`, the default model).

Was: "latest selection wins" was global. A second client's span clicks on another prompt were answered 409 five
times out of five (the first client's polls moved the one focus back to its prompt), and each click restarted the
first client's background job at 0 (the click moved the focus away and cancelled it; its next poll started it
again). Now each page sends its own id (`lit_app/edge/clients.py` `CLIENT_HEADER`, one per page load), and a newer
selection supersedes the older work of its own client only.

Each test uses prompts of its own (the session's server is shared by the worker's tests, and caches by content).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

import sequence_salience as ss
from lit_app.schema import fields, method_registry
from sequence_salience.methods import leave_one_out
from tests.server_process import ServerProcess

pytestmark = pytest.mark.integration

MODEL = "smollm2"
_, SAL, _ = fields.model_group_names(MODEL)
CHUNK = ss.SalienceConfig().ig_step_chunk_size
STEPS = 256  # the server's most (--max_ig_steps): still running when A's newer span comes
# A's first span, run to its answer while B selects: 64 steps is 8 chunks, 7 still to go when B's request is sent
# (its progress polled at the first chunk, B's request sent at once), so B's selection still lands while A runs;
# 256 there (32 chunks to the end) tested nothing more and was most of the test's time.
OVERLAPPED_STEPS = 64

# Client A's prompt: leave one word out measures ~45 words, one forward each (tens of seconds on 2 cores).
A_PROMPT = ("Client A's notes for the two-client test: the ferry to the island leaves at seven, the bakery by the"
            " harbour sells rye bread, the lighthouse museum is closed on Mondays, and the last bus back departs"
            " at nine. Question: when does the ferry leave?")
A_TARGET = " At seven."
# Client B's prompt: another datapoint, clicked span by span.
B_PROMPT = "Client B asks: name two rivers of Europe."
B_TARGET = " The Rhine and the Danube."
SEGMENTS = {fields.DETAIL: method_registry.SEGMENT_DETAIL, fields.SEGMENT_METHOD: leave_one_out.NAME,
            fields.GRANULARITY: "word"}


def _post(server: ServerProcess, data: dict, client: str) -> tuple[int, dict | str]:
    """(status, the output or the error text) of one salience request sent as page `client`."""
    status, _, body = server.post_json(f"/get_preds?model={SAL}", {"inputs": [{"id": "r", "data": data}]},
                                       {"X-Sequence-Salience-Client": client})
    return status, (json.loads(body)[0] if status == 200 else body)


def test_two_clients_on_different_prompts_both_get_every_answer(lit_server):
    """Client A polls a leave-one-word-out job while client B clicks spans of another prompt: B gets every answer
    (no 409), and A's job finishes without restarting (its progress never goes back)."""
    server = lit_server
    a_data = {fields.PROMPT: A_PROMPT, fields.TARGET: A_TARGET, fields.CHAT: False, **SEGMENTS}
    progress: list[tuple[str, int, int]] = []
    failures: list[str] = []
    finished = threading.Event()

    def poll_a() -> None:  # the page of client A polls its job once every 0.3 s, as the module does
        deadline = time.monotonic() + 900  # a failure bound, not a timing assertion
        while time.monotonic() < deadline:
            status, out = _post(server, a_data, "client-a")
            if status != 200:
                failures.append(f"A's poll answered {status}: {str(out)[:300]}")
                break
            detail = out[fields.SALIENCE]["detail"]
            progress.append((detail["state"], detail["done"], detail["total"]))
            if detail["state"] not in ("queued", "running"):
                break
            time.sleep(0.3)
        finished.set()

    poller = threading.Thread(target=poll_a, daemon=True)
    poller.start()
    server.wait_for(lambda: progress[-1] if progress else ("", 0, 0), lambda p: p[0] == "running" and p[1] > 0,
                    "A's job reporting its first forwards")
    # Client B selects its prompt (the first highlight) and clicks spans of the answer, one after the other.
    b_data = {fields.PROMPT: B_PROMPT, fields.TARGET: B_TARGET, fields.CHAT: False, fields.DETAIL: "span"}
    answers = [_post(server, b_data, "client-b")]
    n_targets = len(answers[0][1][fields.SALIENCE]["target_logprobs"]) if answers[0][0] == 200 else 4
    for span in ("0:1", "1:2", f"1:{n_targets}", f"0:{n_targets}"):
        answers.append(_post(server, {**b_data, fields.TARGET_SPAN: span}, "client-b"))
    during = len(progress)
    finished.wait(900)
    poller.join(5)
    assert [status for status, _ in answers] == [200] * 5, [str(out)[:300] for _, out in answers]
    assert all(out[fields.SPAN_SALIENCE] for _, out in answers)
    assert not failures, failures
    assert progress[-1][0] == "done", progress[-5:]
    assert progress[during - 1][0] == "running", "B's clicks came after A's job had ended: nothing was shared"
    dones = [done for _, done, _ in progress]
    assert dones == sorted(dones), f"A's job restarted: its progress went back ({dones})"


def test_within_one_client_a_newer_selection_still_supersedes(lit_server):
    """Client A's IG span goes on to its answer while client B selects another prompt; A's own newer span (the
    user switched method) stops A's next one: 409 "Cancelled: a newer selection replaced this request."."""
    server = lit_server
    a_data = {fields.PROMPT: "Client A, second test: two birds that cannot fly.", fields.TARGET: " Penguins and emus.",
              fields.CHAT: False, fields.DETAIL: "span", fields.IG_STEPS: OVERLAPPED_STEPS}

    def a_started(data: dict):
        conn = server.send_json(f"/get_preds?model={SAL}", {"inputs": [{"id": "r", "data": data}]}, client="client-a2")
        server.wait_for(lambda: _post(server, {**data, fields.DETAIL: "span_progress"}, "client-a2")[1]
                        [fields.SALIENCE]["detail"], lambda s: s["state"] == "running" and s["done"] >= CHUNK,
                        "A's first IG chunk")
        return conn

    # B selects its prompt while A's IG runs (sent after A's first chunk): A's answer still comes.
    old = a_started(a_data)
    try:
        b_data = {fields.PROMPT: "Client B, second test: two metals.", fields.TARGET: " Iron and tin.",
                  fields.CHAT: False, fields.DETAIL: "span"}
        b_answer = _post(server, b_data, "client-b2")
        answer = old.getresponse()
        body = answer.read().decode()
    finally:
        old.close()
    assert b_answer[0] == 200, b_answer
    assert answer.status == 200 and json.loads(body)[0][fields.SPAN_SALIENCE], body[:300]  # was: 409
    # A's own newer span supersedes A's running one.
    older = a_started({**a_data, fields.TARGET_SPAN: "0:2", fields.IG_STEPS: STEPS})
    try:
        newer = _post(server, {**a_data, fields.TARGET_SPAN: "0:2", fields.IG_STEPS: 0}, "client-a2")
        answer = older.getresponse()
        body = answer.read().decode()
    finally:
        older.close()
    assert newer[0] == 200, newer
    assert answer.status == 409 and body.startswith("Cancelled: a newer selection replaced this request."), body
