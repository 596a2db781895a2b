"""Faithfulness curves on the real server: a coarse result in the job's status first, then the full answer.

The request that runs the curves answers with the full result; meanwhile "status" returns the coarse
pass's payload as `partial` (marked preliminary). Its numbers are checked against the full answer's at
the curve points both share (the same edited prompts, scored once on the server), and a cancel sent
while the refinement runs stops it after the coarse result was shown.
"""

from __future__ import annotations

import json
import time

import pytest

from lit_app.wrappers import explain
from lit_app.schema import fields
from tests.server_process import ServerProcess

MODEL = "smollm2"
EXPLAIN = explain.explain_model_name(MODEL)
# Five words a person asks about: word segments, so the full run (every point, 10 random orders, upper bound by
# greedy search) takes clearly longer than its coarse pass (4 points, 3 orders). Was nine words: the full run's
# forwards grow with the points and the greedy search with their square; what is checked does not depend on them.
DATA = {fields.PROMPT: "Which river flows through Paris?", fields.TARGET: " The Seine.",
        explain.ACTION: "curves", explain.GRANULARITY: "word", explain.STEPS: 10, explain.METHODS: "grad_norm"}
WAIT_S = 600
POLL_S = 0.5  # status reads until the coarse result shows (the browser reads every 1 s), then 1 s


def _preds(server: ServerProcess, data: dict) -> dict:
    status, _, body = server.post_json(f"/get_preds?model={EXPLAIN}", {"inputs": [{"id": "r", "data": data}]})
    assert status == 200, body[:2000]
    return json.loads(body)[0][explain.EXPLAIN]


def _status(server: ServerProcess, data: dict) -> dict | None:
    return _preds(server, {**data, explain.ACTION: "status"})["job"]


def _run_until_partial(server: ServerProcess, data: dict):
    """Starts the curves; polls status until it carries the coarse result. (connection, statuses seen)."""
    conn = server.send_json(f"/get_preds?model={EXPLAIN}", {"inputs": [{"id": "r", "data": data}]})
    seen: list[dict] = []
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        job = _status(server, data)
        if job is not None and job["action"] == "curves":
            seen.append(job)
            if "partial" in job:
                return conn, seen
        time.sleep(POLL_S)
    conn.close()
    pytest.fail(f"no coarse result in the status within {WAIT_S} s: {seen[-3:]}")


def _answer(conn) -> dict:
    res = conn.getresponse()
    body = res.read().decode()
    conn.close()
    assert res.status == 200, body[:2000]
    return json.loads(body)[0][explain.EXPLAIN]


def test_status_carries_the_coarse_curves_then_the_answer_is_the_full_result(lit_server):
    conn, seen = _run_until_partial(lit_server, DATA)
    coarse = seen[-1]["partial"]
    stage_at_partial = seen[-1]["stage"]
    later = []
    while (job := _status(lit_server, DATA)) is not None and job["action"] == "curves":
        later.append(job)
        time.sleep(1.0)
    full = _answer(conn)
    # The coarse pass: 4 points, 3 random orders, no upper bound; said to be preliminary and what refines it.
    assert coarse["preliminary"] is True and full["preliminary"] is False
    assert coarse["refining"] == {"steps": 10, "n_random": 10, "upper_bound": True}
    assert coarse["steps"] == 4 and len(coarse["n_removed"]) == 5 and coarse["n_random"] == 3
    assert coarse["upper_bound"] is None and "upper_bound" not in coarse["curves"]
    assert full["n_random"] == 10 and full["upper_bound"] is not None and "upper_bound" in full["curves"]
    # Only the question's own words are removed, not the chat template's system prompt (12 more words).
    assert full["fields"] == ["prompt"] and full["n_segments"] <= len(DATA[fields.PROMPT].split()) + 1
    n = full["n_segments"]
    assert coarse["n_segments"] == n and full["steps"] == min(10, n) and full["n_removed"] == list(range(n + 1))
    # While it refines, the progress is the refinement's own (never the coarse stage again).
    stages = [stage_at_partial] + [j["stage"] for j in later]
    assert "coarse_curves" not in stages, stages
    assert all("partial" in j for j in later), "the coarse result stays in the status until the answer"
    assert {j["stage"] for j in seen[:-1]} <= {"starting", "generating", "waiting", "salience", "coarse_curves"}
    # The same edited prompts give the same numbers: each coarse point equals the full curve's point
    # with as many segments removed (the first random orders are the same seeded orders).
    assert coarse["original_logprob"] == pytest.approx(full["original_logprob"], abs=1e-4)
    for k, removed in enumerate(coarse["n_removed"]):
        j = full["n_removed"].index(removed)
        for mode in ("deletion", "insertion"):
            for name in ("grad_norm", "length"):
                assert coarse["curves"][name][mode]["logprobs"][k] == pytest.approx(
                    full["curves"][name][mode]["logprobs"][j], abs=1e-3), (name, mode, removed)


def test_a_cancel_while_refining_stops_the_test_after_the_coarse_result(lit_server):
    data = {**DATA, fields.PROMPT: "Which river flows through the old city of Rome?"}
    conn, seen = _run_until_partial(lit_server, data)
    assert seen[-1]["partial"]["preliminary"] is True
    assert _preds(lit_server, {**data, explain.ACTION: "cancel"})["cancelled"] is True
    out = _answer(conn)
    assert out["cancelled"] is True and out["reason"] == "a cancel request", out
