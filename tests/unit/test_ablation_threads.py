"""The intra-op thread count of an ablation's forward batches is measured, not assumed (issue 43 §4).

Leave one word out slowed from ~0.8 s to ~27 s per forward on a loaded machine: torch's two intra-op threads
wait at a barrier in every op of a small forward (sequence_salience/threads.py). These tests check
the mechanism with a fake clock whose cost depends on the thread count the forward really runs with; no
wall-clock time is asserted.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sequence_salience.ablation import PrefixScorer
from sequence_salience.threads import ThreadChooser
from tests.unit.tiny_models import MODEL_BUILDERS, wrap


def UNCONTESTED() -> float:
    """A fake machine's run queue: the chooser's thread never waits for a core (the fake clock's costs are all)."""
    return 0.0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _costs(chooser: ThreadChooser, per_token: dict[int, float], batches: int, tokens: int = 10) -> list[int]:
    """Runs `batches` batches whose cost per token depends on the chosen count; returns the counts used."""
    clock = chooser.clock
    for _ in range(batches):
        with chooser.batch(tokens) as threads:
            clock.now += per_token[threads] * tokens
    return chooser.used[-batches:]


def test_it_settles_on_the_cheaper_count_and_notices_when_that_changes():
    chooser = ThreadChooser(most=2, explore_every=8, clock=FakeClock(), waited=UNCONTESTED)
    loaded = {2: 0.5, 1: 0.06}  # 2 threads ~8x slower per token (a loaded machine)
    used = _costs(chooser, loaded, 26)
    # each count once (1 first), then the cheaper (1); 2 tried again after 8 batches, then after 16 (confirmed)
    assert used == [1, 2] + [1] * 7 + [2] + [1] * 15 + [2]
    idle = {2: 0.02, 1: 0.04}  # the load went away: 2 threads cheaper
    used = _costs(chooser, idle, 40)
    # 1 until the next try of 2 (after 32 batches: the interval doubled again), which finds it cheaper; then 2,
    # and 1 tried again after 8 batches (the interval starts afresh after a change)
    assert used == [1] * 31 + [2] + [2] * 7 + [1]
    assert chooser.interval == 16


def test_no_try_of_more_threads_while_its_thread_waits_for_a_core():
    """Session 34 (h4): under load (two busy processes beside the server) every multi-second stall of leave one
    word out was a try of 2 threads (10-25 s against 1-3 s for a row with 1), the job's thread waiting on the run
    queue for 80-87 % of it. A fake machine whose batches wait for a core `share` of their time (the run queue
    read around each batch, as /proc/thread-self/schedstat is): while the share is over CONTESTED, 2 threads are
    never tried (was: at the second batch, then after 8, 16, 32 batches); once the cores are free, the next batch
    after an uncontested one tries them, and they are chosen where cheaper."""
    clock, queue, share = FakeClock(), [0.0], [0.8]
    chooser = ThreadChooser(most=2, explore_every=8, clock=clock, waited=lambda: queue[0])

    def run(batches: int, per_token: dict[int, float]) -> list[int]:
        for _ in range(batches):
            with chooser.batch(10) as threads:
                clock.now += per_token[threads] * 10
                queue[0] += share[0] * per_token[threads] * 10
        return chooser.used[-batches:]

    loaded = {2: 0.5, 1: 0.06}  # the benchmark's rows: 2 threads ~8x slower per token
    assert run(60, loaded) == [1] * 60
    assert chooser.put_off == 59 and chooser.cost.keys() == {1}
    share[0], idle = 0.05, {2: 0.02, 1: 0.04}  # the other work ended: the cores are free
    assert run(3, idle) == [1, 2, 2]  # the batch measured under load, the try, then the cheaper count
    share[0] = 0.9  # loaded again: one slow batch with 2 makes 1 the cheaper; 2's next tries are put off
    assert run(12, loaded) == [2] + [1] * 11 and chooser.put_off > 59


def test_the_run_queue_is_read_for_the_calling_thread():
    from sequence_salience import threads

    first = threads.run_queue_s()
    if first is None:
        pytest.skip("no /proc/thread-self/schedstat here (not Linux)")
    sum(range(200_000))
    assert first >= 0 and threads.run_queue_s() >= first


def test_one_thread_or_no_measurement_means_no_choice():
    assert _costs(ThreadChooser(most=1, clock=FakeClock(), waited=UNCONTESTED), {1: 1.0}, 5) == [1] * 5
    assert _costs(ThreadChooser(most=2, measure=False, clock=FakeClock(), waited=UNCONTESTED),
                  {2: 9.0, 1: 0.1}, 5) == [2] * 5


def test_prefix_scorer_runs_its_batches_with_the_chosen_count_and_restores_the_thread_after():
    """PrefixScorer sets the chosen count around each edited batch (seen inside the model's forward), its values
    are those of a scorer that always uses one count, and the caller's count is back after the call."""
    family = sorted(MODEL_BUILDERS)[0]
    lm = wrap(MODEL_BUILDERS[family]().float(), family)
    rng = np.random.default_rng(0)
    prompt = [int(i) for i in rng.integers(5, 40, size=40)]
    target = [int(i) for i in rng.integers(5, 40, size=6)]
    edited = []
    for at in range(2, 38, 3):  # 12 rows with different first changed tokens: 12 batches of one row
        row = list(prompt)
        row[at] = 4
        edited.append(row)
    clock = FakeClock()
    seen: list[int] = []

    def forward_cost(_module, _args):
        # The fake machine is loaded: a forward with 2 threads "takes" 8x as long as with 1.
        seen.append(torch.get_num_threads())
        clock.now += 0.8 if torch.get_num_threads() > 1 else 0.1

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        hook = lm.model.register_forward_pre_hook(forward_cost)
        try:
            chooser = ThreadChooser(most=2, explore_every=8, clock=clock, waited=UNCONTESTED)
            scorer = PrefixScorer(lm, prompt, target, (0, 6), batch_size=1, threads=chooser)
            got = scorer(edited)
            after = torch.get_num_threads()
        finally:
            hook.remove()
        fixed = PrefixScorer(lm, prompt, target, (0, 6), batch_size=1, threads=ThreadChooser(most=1))(edited)
    finally:
        torch.set_num_threads(before)
    assert seen == chooser.used and len(seen) == 13  # the unedited forward and 12 batches, each with its count
    # the unedited forward with 1, the first batch with 2, then the cheaper (1); 2 tried again after 8
    assert seen == [1, 2] + [1] * 7 + [2] + [1] * 3
    assert after == 2  # the caller's count, restored after every batch
    np.testing.assert_allclose(got, fixed, rtol=0, atol=1e-5)
