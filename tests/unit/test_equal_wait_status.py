"""A job that takes turns on the model with an equal says so, the same way at every poll (issue 43): equals share the
model's time (lit_app/model/scheduler.py, virtual time), so a matrix job lets another client's background work use
the model between its slices. Session 35 said "running" throughout; session 36 said "waiting" (paused, no estimate)
in the equal's turns and gave an estimate in its own, alternating from one poll to the next. Now its status says
"sharing" with another client's job, with the estimate (whose rate counts the equal's turns), in both, until a slice
boundary finds no equal. Tiny random Llama; statuses read at each turn, no timing involved."""

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

EQUAL_TURNS = 3


def test_a_matrix_job_taking_turns_with_another_clients_equal_job_says_sharing_at_every_poll():
    shared = shared_model.SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=4,
                                   disk_cache=False, salience_config=ss.SalienceConfig(target_chunk_size=1))
    chat = shared.format_prompt({"prompt": "Alice has three apples and Bob has two apples;"})
    job = Job(group="A", kind="grad", heartbeat_s=None)
    own_turns: list[dict] = []  # the job's status at each of its reports (its own turns)
    equal_turns: list[dict] = []  # its status read in each of the equal's turns
    started = threading.Event()

    def other_client() -> None:  # another client's background work: an equal of the matrix job, several turns
        with clients.acting_as("tab-b"):
            for _ in range(EQUAL_TURNS):
                with shared.lock.background():
                    with clients.acting_as("tab-a"):
                        equal_turns.append(job.status())

    report = job.report

    def report_then_queue_an_equal(*progress, **kw) -> None:
        report(*progress, **kw)
        if started.is_set():
            own_turns.append(job.status())
        elif job.done > 0:  # once a unit is done (an estimate): the equal queues, and takes turns from the next yield
            started.set()
            own_turns.append(job.status())
            threading.Thread(target=other_client, name="tab-b").start()
            wait_until(lambda: shared.lock.waiting(Priority.BACKGROUND) == 1, "the equal to queue")

    job.report = report_then_queue_an_equal
    with clients.acting_as("tab-a"), job.running():
        job.result = shared.salience(chat, " together they have five apples.", job=job)
    wait_until(lambda: len(equal_turns) == EQUAL_TURNS, "the equal's turns")
    assert fields.SHARING not in own_turns[0]  # before the equal came
    for during in equal_turns:  # was: "waiting": true without an estimate
        assert during["state"] == "running" and during["waiting"] is False, during
        assert during[fields.SHARING] == fields.WAITING_OTHER and during["eta_s"] is not None, during
    # Its own turns from the equal's first to its last say the same (the report right after the equal's last turn
    # still does: the slice boundary that finds no equal comes after it), then not once the equal is gone.
    sharing = [s.get(fields.SHARING) for s in own_turns[1:]]
    assert sharing[:EQUAL_TURNS] == [fields.WAITING_OTHER] * EQUAL_TURNS, own_turns
    assert all(s["eta_s"] is not None and s["waiting"] is False for s in own_turns[1:EQUAL_TURNS + 1]), own_turns
    assert len(sharing) > EQUAL_TURNS + 1 and sharing[-1] is None, own_turns
    assert job.status()["state"] == "done" and fields.SHARING not in job.status()
    shared.jobs.cancel_all()
