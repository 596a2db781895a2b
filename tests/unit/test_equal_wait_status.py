"""A job whose turn goes to an equal says "waiting" (issue 43, session 35's leftover): equals share the model's time
(lit_app/model/scheduler.py, virtual time), so a matrix job lets another client's background work use the model
between its slices; meanwhile its status said "running". Tiny random Llama; the equal reads the job's status while it
holds the model (no timing involved)."""

from __future__ import annotations

import threading

import sequence_salience as ss
from lit_app.edge import clients
from lit_app.model import shared_model
from lit_app.model.jobs import Job
from lit_app.model.scheduler import Priority
from lit_app.schema import fields
from tests.unit.tiny_models import MODEL_BUILDERS, wrap
from tests.unit.waiting import wait_until


def test_a_matrix_job_whose_turn_goes_to_another_clients_equal_job_says_waiting_for_other():
    shared = shared_model.SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4,
                                   disk_cache=False, salience_config=ss.SalienceConfig(target_chunk_size=1))
    chat = shared.format_prompt({"prompt": "Alice has three apples and Bob has two apples;"})
    job = Job(group="A", kind="grad", heartbeat_s=None)
    seen: dict[str, dict] = {}
    equal = threading.Event()

    def other_client() -> None:  # another client's background work: an equal of the matrix job
        with clients.acting_as("tab-b"), shared.lock.background():
            with clients.acting_as("tab-a"):
                seen["during"] = job.status()

    report = job.report

    def report_then_queue_an_equal(*progress, **kw) -> None:
        report(*progress, **kw)
        if not equal.is_set():  # after the first slice: the equal queues, and goes first at the job's next yield
            equal.set()
            seen["before"] = job.status()
            threading.Thread(target=other_client, name="tab-b").start()
            wait_until(lambda: shared.lock.waiting(Priority.BACKGROUND) == 1, "the equal to queue")

    job.report = report_then_queue_an_equal
    with clients.acting_as("tab-a"), job.running():
        job.result = shared.salience(chat, " together they have five apples.", job=job)
    wait_until(lambda: "during" in seen, "the equal to run")
    assert seen["before"]["waiting"] is False
    during = seen["during"]
    assert during["state"] == "running" and during["waiting"] is True and during["eta_s"] is None, during  # was False
    assert during[fields.WAITING_FOR] == fields.WAITING_OTHER, during
    assert job.status()["state"] == "done" and job.status()["waiting"] is False
    shared.jobs.cancel_all()
