"""Background jobs belong to the clients that asked for them (issue 43 §2, lit_app/model/progressive.py `DetailJobs`):
a client's newer selection, count or cancel releases its own part only; the live jobs are bounded per client
and on the server. No model: the jobs wait on an event."""

from __future__ import annotations

import threading

from lit_app.model import progressive


def _waiting(gate: threading.Event):
    return lambda _job: gate.wait(30)


def test_a_job_two_clients_asked_for_runs_until_neither_wants_it():
    jobs, gate = progressive.DetailJobs(), threading.Event()
    try:
        job = jobs.submit("A", "grad", _waiting(gate), client="tab-1")
        assert jobs.submit("A", "grad", _waiting(gate), client="tab-2") is job  # the same computation, shared
        jobs.focus("B", "tab-1")  # tab-1 moves on
        assert not job.cancelled and job.owners == {"tab-2"}
        assert jobs.cancel_job("A", "", "a cancel", client="tab-2") is None  # a cancel names a job by its id
        jobs.focus("C", "tab-2")
        assert job.cancelled and job.cancel_reason == "another datapoint was selected"
    finally:
        gate.set()


def test_a_cancel_by_id_stops_only_its_clients_part():
    jobs, gate = progressive.DetailJobs(), threading.Event()
    try:
        job = jobs.submit("A", "ig8", _waiting(gate), job_id="ig8-1", client="tab-1")
        jobs.get("A", "ig8", "tab-2")  # tab-2 polls it too
        assert jobs.cancel_job("A", "ig8-1", "the page switched away", client="tab-3") is job
        assert not job.cancelled  # tab-3 never asked for it
        jobs.cancel_job("A", "ig8-1", "the page switched away", client="tab-1")
        assert not job.cancelled  # tab-2 still polls it
        jobs.cancel_job("A", "ig8-1", "the page switched away", client="tab-2")
        assert job.cancelled
    finally:
        gate.set()


def test_the_live_jobs_are_bounded_per_client_and_on_the_server():
    jobs, gate = progressive.DetailJobs(), threading.Event()
    try:
        mine = [jobs.submit(("a", k), "grad", _waiting(gate), client="tab-a") for k in range(progressive.MAX_LIVE_JOBS + 2)]
        other = jobs.submit(("b", 0), "grad", _waiting(gate), client="tab-b")
        assert [j.cancelled for j in mine] == [True, True] + [False] * progressive.MAX_LIVE_JOBS  # its oldest go
        assert not other.cancelled  # another client's jobs do not count against tab-a's
        many = [jobs.submit(("c", k), "grad", _waiting(gate), client=f"tab-{k}")
                for k in range(progressive.MAX_LIVE_JOBS_TOTAL)]
        live = [j for j in mine + [other] + many if not j.cancelled]
        assert len(live) == progressive.MAX_LIVE_JOBS_TOTAL and all(not j.cancelled for j in many)
    finally:
        gate.set()


def test_a_request_without_a_client_id_supersedes_nothing():
    jobs, gate = progressive.DetailJobs(), threading.Event()
    try:
        job = jobs.submit("A", "ig8", _waiting(gate), client="tab-1")
        anonymous = jobs.submit("A", "ig16", _waiting(gate), replaces="ig")  # a script's other count
        jobs.focus("B", "")
        assert not job.cancelled and not anonymous.cancelled
        jobs.submit("A", "ig32", _waiting(gate), replaces="ig", client="tab-1")  # tab-1's newer count
        assert job.cancelled and not anonymous.cancelled
    finally:
        gate.set()


def test_a_closed_pages_jobs_stop_at_once_unless_another_client_still_wants_them():
    """`release_client` (the page's `detail="page_closed"` as it goes away): every live job of that client stops
    with the reason, at once rather than after the heartbeat; a job another client polls too runs on for it;
    other clients' jobs and a request without a client id are left alone."""
    jobs, gate = progressive.DetailJobs(heartbeat_s=600), threading.Event()
    try:
        grad = jobs.submit("A", "grad", _waiting(gate), client="tab-1")
        segments = jobs.submit("A", "seg:leave_one_out", _waiting(gate), lane="segments", client="tab-1")
        shared = jobs.submit("A", "ig8", _waiting(gate), client="tab-1")
        jobs.get("A", "ig8", "tab-2")  # tab-2 polls it too
        other = jobs.submit("B", "grad", _waiting(gate), client="tab-2")
        anonymous = jobs.submit("C", "grad", _waiting(gate))
        jobs.focus("A", "tab-1")
        released = jobs.release_client("tab-1", "its page was closed")
        assert [j.kind for j in released] == ["grad", "seg:leave_one_out", "ig8"]
        assert grad.cancelled and grad.cancel_reason == "its page was closed"
        assert segments.cancelled and segments.cancel_reason == "its page was closed"
        assert not shared.cancelled and shared.owners == {"tab-2"}
        assert not other.cancelled and not anonymous.cancelled
        assert jobs.focus_of("tab-1") == (None, 0)  # its focus is forgotten
        assert jobs.release_client("", "its page was closed") == [] and not anonymous.cancelled
        assert jobs.release_client("tab-1", "its page was closed") == []  # nothing of it is left to stop
    finally:
        gate.set()
