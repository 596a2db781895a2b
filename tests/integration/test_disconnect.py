"""Every computation a client started stops within one chunk once that client goes away or a newer
request supersedes it (issue 33), on the real server (`python -m lit_app.server`, the default model).

One test per kind of computation: a span's integrated gradients (a clicked span) and SmoothGrad (a
first highlight), a span replaced by a newer span of its datapoint, an explanation test (IG
auto-steps), an intervention run, a background matrix job nobody polls. Each starts the work,
closes the socket mid-run (or stops polling, or sends the newer request), and checks (a) from the
server's own progress report or log that the work stopped within one chunk of the moment it was
abandoned, and (b) that the next request (a trace: one forward, which waits for the model) is
answered. The disconnect-to-free times are printed (docs/benchmarks.md, "Disconnect to free,
issue 33"), never asserted. The blocking `detail=""` request has its own test in test_robustness.py.

"Within one chunk": the progress read just before the close may be one chunk behind the chunk
running at the close, and the chunk running when the client goes is finished before the check
that stops it, so the work done at the end is at most two chunks past the last progress read.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

import sequence_salience as ss
from lit_app.wrappers import explain, inside
from lit_app.schema import fields
from tests.server_process import ServerProcess

MODEL = "smollm2"
GEN, SAL, TOK = fields.model_group_names(MODEL)
EXPLAIN = explain.explain_model_name(MODEL)
TRACE, INTERVENE, _ = inside.model_names(MODEL)
HEARTBEAT_S = 2
MAX_NEW_TOKENS = 48
# Steps (IG) or samples (SmoothGrad) per forward of a span: the span's chunk.
SPAN_CHUNK = ss.SalienceConfig().ig_step_chunk_size
COUNT = 32  # steps or samples: 4 chunks, so "stopped within one chunk" and "ran to the end" differ
FINISHED = ("done", "cancelled", "error")
NEXT = {fields.PROMPT: "What is the capital of France?", fields.TARGET: " Paris.", inside.INSIDE_T: 0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Its own process, not the session's `lit_server`: start-up flags (--job_heartbeat_s 2 for the unpolled
    matrix job, --max_new_tokens 48 for the intervention run), and the log is read per test."""
    with ServerProcess(["--max_new_tokens", str(MAX_NEW_TOKENS), "--job_heartbeat_s", str(HEARTBEAT_S)],
                       tmp_path_factory.mktemp("server")) as proc:
        _next_request(proc)  # the trace's first call resolves the architecture: not part of a figure
        yield proc


# Every request of this file comes from one page (lit_app/edge/clients.py): its newer selection supersedes its older work.
PAGE = "test-disconnect"


def _send(server: ServerProcess, model: str, data: dict):
    return server.send_json(f"/get_preds?model={model}", {"inputs": [{"id": "r", "data": data}]}, client=PAGE)


def _next_request(server: ServerProcess) -> float:
    """Seconds to answer a trace of another prompt (one forward; it waits until the model is free)."""
    start = time.monotonic()
    out = server.preds(TRACE, NEXT)
    assert out[inside.TRACE]["t"] == 0
    return time.monotonic() - start


def _close_mid_run(server: ServerProcess, model: str, data: dict, progress, started, ended,
                   what: tuple[str, str]) -> tuple[Any, Any, float, float]:
    """Sends `data` to `model`, closes the connection (the tab is closed: the client goes away without reading
    the answer) once `started(progress())`, times the next request, then reads `progress()` until `ended`.

    Returns (progress before the close, progress at the end, seconds to answer the next request, seconds from
    the close to the end); `what`: (the start, the end) for the failure messages.
    """
    conn = _send(server, model, data)
    try:
        seen = server.wait_for(progress, started, what[0])
    finally:
        conn.close()
    closed = time.monotonic()
    next_s = _next_request(server)
    end = server.wait_for(progress, ended, what[1])
    return seen, end, next_s, time.monotonic() - closed


def _logged(server: ServerProcess, start: int, pattern: str, what: str) -> re.Match:
    """The first match of `pattern` in the log since `start`, waited for: a user job leaves the job table (its status
    reads None) a moment before its wrapper writes the outcome line (CI once read the log in between)."""
    return server.wait_for(lambda: re.search(pattern, server.log_path.read_text()[start:]), bool, what, limit_s=60)


def _report(kind: str, stopped_s: float, next_s: float, detail: str) -> None:
    print(f"\ndisconnect to free, {kind}: stopped after {stopped_s:.2f} s, next request answered after "
          f"{next_s:.2f} s ({detail})")


def _span_progress(server: ServerProcess, data: dict) -> dict:
    out = server.preds(SAL, {**data, fields.DETAIL: "span_progress"}, client=PAGE)
    return out[fields.SALIENCE]["detail"]


@pytest.mark.parametrize("kind, extra", [
    pytest.param("span IG (clicked span)", {fields.IG_STEPS: COUNT, fields.TARGET_SPAN: "0:2"}, id="ig-clicked-span"),
    pytest.param("span SmoothGrad (first highlight)", {fields.SMOOTH_GRAD_SAMPLES: COUNT}, id="smoothgrad-first"),
])
def test_a_span_stops_within_one_chunk_when_its_client_disconnects(server, kind, extra):
    # No chat template: a short sequence keeps each chunk short on a busy machine.
    data = {fields.PROMPT: f"Two colours of the sea ({kind}):", fields.TARGET: " blue and green.",
            fields.CHAT: False, fields.DETAIL: "span", **extra}
    seen, end, next_s, stopped_s = _close_mid_run(
        server, SAL, data, lambda: _span_progress(server, data), lambda s: s["done"] >= SPAN_CHUNK,
        lambda s: s["state"] in FINISHED, ("the first chunk of the span", "the span's end"))
    _report(kind, stopped_s, next_s, f"{seen['done']} of {seen['total']} before the close, {end['done']} at the end")
    assert end["state"] == "cancelled", end
    assert seen["done"] <= end["done"] <= seen["done"] + 2 * SPAN_CHUNK < end["total"], (seen, end)
    assert "Traceback" not in server.log_path.read_text()


def test_a_span_stops_within_one_chunk_when_a_newer_span_of_its_datapoint_replaces_it(server):
    """The user switches method while IG computes the first highlight: the IG request stops."""
    data = {fields.PROMPT: "Two animals that live in the sea:", fields.TARGET: " fish and crabs.",
            fields.CHAT: False, fields.DETAIL: "span", fields.IG_STEPS: COUNT}
    old = _send(server, SAL, data)
    try:
        seen = server.wait_for(lambda: _span_progress(server, data), lambda s: s["done"] >= SPAN_CHUNK,
                               "the first chunk of the span")
        sent = time.monotonic()
        newer = server.preds(SAL, {**data, fields.IG_STEPS: 0}, client=PAGE)  # plain gradients: one forward + backward
        next_s = time.monotonic() - sent
        answer = old.getresponse()
        body = answer.read().decode()
    finally:
        old.close()
    stopped = re.search(r"stopped after (\d+) of (\d+)", body)
    _report("span replaced by a newer span", next_s, next_s, f"{seen['done']} of {seen['total']} before the newer,"
            f" {stopped[1] if stopped else '?'} at the end")
    assert set(newer[fields.SPAN_SALIENCE]) == {"grad_norm", "grad_x_input"}
    assert answer.status == 409, body
    assert body.startswith("Cancelled: a newer selection replaced this request."), body
    assert stopped, body
    assert seen["done"] <= int(stopped[1]) <= seen["done"] + 2 * SPAN_CHUNK < int(stopped[2]), (seen, body)
    # A normal cancellation: one INFO line, no ERROR with LIT's traceback.
    log = server.log_path.read_text()
    assert "Traceback" not in log and "Uncaught error: Cancelled" not in log, log[-3000:]


def _explain_status(server: ServerProcess, data: dict) -> dict | None:
    return server.preds(EXPLAIN, {**data, explain.ACTION: "status"}, client=PAGE)[explain.EXPLAIN]["job"]


def test_an_explanation_test_stops_within_one_step_when_its_client_disconnects(server):
    start = len(server.log_path.read_text())
    # IG auto-steps with a tolerance it never meets: 8 + 16 + 32 = 56 steps, one per pass.
    data = {fields.PROMPT: "Name a river in France.", fields.TARGET: " The Seine.", explain.ACTION: "ig_auto",
            fields.IG_STEPS: COUNT, explain.IG_TOLERANCE: 1e-9}
    seen, _, next_s, stopped_s = _close_mid_run(
        server, EXPLAIN, data, lambda: _explain_status(server, data),
        lambda j: j is not None and j["stage"] == "ig_steps" and j["done"] >= 2, lambda j: j is None,
        ("two IG steps", "the end of the test"))
    line = _logged(server, start, r"explain ig_auto: (.*) at ig_steps (\d+)/(\d+)", "the explanation test's last line")
    _report("explanation test (IG auto-steps)", stopped_s, next_s, f"{seen['done']} of {seen['total']} steps before"
            f" the close; log: {line[0] if line else None}")
    assert line[1] == "cancelled (the client disconnected)", line[0]
    assert seen["done"] <= int(line[2]) <= seen["done"] + 2 < int(line[3]), (seen, line[0])


def _run_status(server: ServerProcess, data: dict) -> dict | None:
    return server.preds(INTERVENE, {**data, inside.INSIDE_ACTION: "status"}, client=PAGE)[inside.INTERVENTION]["job"]


def test_an_intervention_run_stops_within_one_token_when_its_client_disconnects(server):
    start = len(server.log_path.read_text())
    data = {fields.PROMPT: "Write a long story about a dragon who lives in a castle.", inside.INSIDE_T: 0,
            inside.INTERVENTIONS: json.dumps([{"layer": 10, "index": 5, "mode": "off"}])}
    seen, _, next_s, stopped_s = _close_mid_run(
        server, INTERVENE, data, lambda: _run_status(server, data),
        lambda j: j is not None and j["stage"] == "generate" and j["done"] >= 2, lambda j: j is None,
        ("two regenerated tokens", "the end of the run"))
    line = _logged(server, start, r"inside intervene: 1 intervention\(s\), (.*?) (?:at (\w+) (\d+)/(\d+) )?in",
                   "the intervention run's last line")
    _report("intervention run", stopped_s, next_s, f"{seen['done']} of {seen['total']} tokens before the close;"
            f" log: {line[0] if line else None}")
    assert line[1] == "cancelled (the client disconnected)", line[0]
    assert line[2] == "generate" and seen["done"] <= int(line[3]) <= seen["done"] + 2 < int(line[4]), (seen, line[0])


def test_a_matrix_job_nobody_polls_stops(server):
    """A background job has no connection of its own: abandoned when nobody polls it for --job_heartbeat_s."""
    start = len(server.log_path.read_text())
    data = {fields.PROMPT: "Read the notes. Parcel one left the depot at nine by van. Parcel two left at ten by"
            " bike. Which parcel left first?", fields.IG_STEPS: COUNT,
            # A long target: many rows, so that the job cannot end within the heartbeat after its first slice on a
            # loaded machine (a 6-token target once ended 7 of 7 as the cancellation came: work left unproven).
            fields.TARGET: " Parcel one left first: it left the depot at nine by van, an hour before parcel two,"
                           " which left at ten by bike."}

    def poll() -> dict:
        return server.preds(SAL, {**data, fields.DETAIL: "poll"}, client=PAGE)[fields.SALIENCE]["detail"]

    started = server.preds(SAL, {**data, fields.DETAIL: "ig_matrix"}, client=PAGE)[fields.SALIENCE]["detail"]
    assert started["kind"] == f"ig{COUNT}"
    seen = server.wait_for(poll, lambda s: s["state"] == "running" and s["done"] > 0, "the job's first slice")
    last_poll = time.monotonic()  # the page is closed: nobody polls from here on
    # The job's one line once it stopped (lit_app/model/progressive.py `_work`).
    line = re.compile(rf"INFO lit_app\.model\.progressive: Cancelled the ig{COUNT} job for .* \(nobody polled it for "
                      rf"{HEARTBEAT_S} s\) after ")
    server.wait_for(lambda: server.log_path.read_text()[start:], lambda log: line.search(log) is not None,
                    "the job's cancellation")
    stopped_s = time.monotonic() - last_poll
    next_s = _next_request(server)
    end = poll()
    _report("background matrix job (heartbeat %d s)" % HEARTBEAT_S, stopped_s, next_s,
            f"{seen['done']} of {seen['total']} at the last poll, {end['done']} at the end; next request timed"
            " from the cancellation")
    assert end["state"] == "cancelled" and end["done"] < end["total"], end


def test_a_comparisons_segment_measurement_stops_when_its_client_disconnects(server):
    """"Compare an edit" with a segment method on screen measures both prompts with it (lit_app/wrappers/compare.py);
    the tab is closed mid-measurement: the leave-one-out forwards stop before the end, the cancellation is one
    INFO line, and the next request is answered."""
    start = len(server.log_path.read_text())
    notes = " ".join(f"Box {i} holds {i * 3} red apples and {i + 2} green pears." for i in range(1, 13))
    data = {fields.PROMPT: notes + " How many red apples does box 7 hold?", fields.TARGET: " Box 7 holds 21.",
            fields.PINNED_PROMPT: notes + " How many green pears does box 7 hold?",
            fields.PINNED_TARGET: " Box 7 holds 9.", fields.CHAT: False, fields.WITH_PINNED_SALIENCE: True,
            fields.SEGMENT_METHOD: "leave_one_out", fields.GRANULARITY: "word", fields.REMOVAL: "delete"}
    progress = re.compile(r"INFO lit_app\.model\.salience_runs: salience leave_one_out: (\d+)/(\d+)")

    def log() -> str:
        return server.log_path.read_text()[start:]

    seen, end, next_s, stopped_s = _close_mid_run(
        server, fields.compare_model_name(MODEL), data, lambda: progress.findall(log()), bool,
        lambda _: "CompareModel: Cancelled: the client disconnected" in log(),
        ("the first leave-one-out forwards", "the comparison's cancellation"))
    done, total = (int(n) for n in seen[-1])
    after = log()
    _report("comparison's segment measurement (leave one word out)", stopped_s, next_s,
            f"{done} of {total} before the close; last progress logged {progress.findall(after)[-1]}")
    assert total > 100, seen  # one forward per word and one whole prompt: far more work than the close takes
    assert all(int(d) < int(t) for d, t in progress.findall(after)), after[-3000:]  # stopped before the end
    lines = [line for line in after.splitlines() if "CompareModel: Cancelled" in line]
    assert len(lines) == 1 and " INFO " in lines[0], lines
    assert "Traceback" not in after and " ERROR " not in after, after[-3000:]
