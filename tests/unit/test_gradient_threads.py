"""The first highlight's gradient pass runs with the thread count of one chooser per loaded model and size class of
pass, measured across requests (sequence_salience/threads.py `ThreadChooser`, `PassSizes`;
lit_app/model/salience_runs.py; issue 43 §4): on a loaded 2-core machine a short prompt's pass took 16-78 s with 2
torch threads and 4-5 s with 1 (docs/benchmarks.md)."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

import sequence_salience as ss
from lit_app.model import shared_model
from sequence_salience import threads
from lit_app.schema import inputs
from sequence_salience.methods import DEFAULT_METHODS, leave_one_out
from sequence_salience.threads import PassSizes, ThreadChooser
from tests.unit.tiny_models import tiny_llama, wrap


def _counting(lm: ss.LanguageModel) -> tuple[list[int], object]:
    """The torch thread count each forward of `lm` runs with (a list filled by a pre-hook) and the hook."""
    seen: list[int] = []
    hook = lm.model.register_forward_pre_hook(lambda _m, _a: seen.append(torch.get_num_threads()))
    return seen, hook


def test_compute_span_result_runs_its_gradient_pass_with_the_chosen_count_and_the_same_values():
    lm = wrap(tiny_llama(seed=0), "llama")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    seen, hook = _counting(lm)
    try:
        plain = ss.compute_span_result(lm, "The capital of France is", " Paris.")
        chooser = ThreadChooser(most=2, waited=lambda: 0.0)  # an uncontested machine: 2 threads are tried
        chosen = [ss.compute_span_result(lm, "The capital of France is", " Paris.", threads=chooser)
                  for _ in range(2)]
        after = torch.get_num_threads()
    finally:
        hook.remove()
        torch.set_num_threads(before)
    assert seen == [2, 1, 2] and chooser.used == [1, 2]  # each option once, 1 first; the caller's count first
    assert after == 2  # restored after each pass
    assert chooser.cost.keys() == {1, 2}  # seconds per token of each count, measured
    for got in chosen:
        for method in DEFAULT_METHODS:
            np.testing.assert_allclose(got.span_salience(method, 0, None), plain.span_salience(method, 0, None),
                                       rtol=1e-5, atol=1e-6)


@contextlib.contextmanager
def _server_on_two_threads(monkeypatch):
    """(tiny Llama, its server, the thread count of each forward) with 2 torch threads on an uncontested machine
    (2 threads are tried); the caller's count back after."""
    monkeypatch.setattr(threads, "run_queue_s", lambda: 0.0)
    lm = wrap(tiny_llama(seed=0), "llama")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False)
    seen, hook = _counting(lm)
    try:
        yield lm, shared, seen
    finally:
        hook.remove()
        torch.set_num_threads(before)


def test_the_servers_span_passes_share_one_chooser_across_requests(monkeypatch):
    with _server_on_two_threads(monkeypatch) as (lm, shared, seen):
        for prompt in ("The capital of France is", "Two rivers of Europe:", "A bird that cannot fly:"):
            shared.quick(lm.format_prompt(prompt), " Paris.", 0, None)
    sizes = shared.runs.threads
    assert isinstance(sizes, PassSizes) and len(sizes.choosers) == 1  # short prompts: one size class
    chooser = sizes.chooser(10)
    assert chooser.most == 2 and chooser.batches == 3  # one chooser for the model, not one per request
    assert seen == chooser.used and chooser.used[:2] == [1, 2]  # each pass ran with the count it chose


def test_passes_of_other_sizes_are_measured_apart():
    """Seconds per token are lower for a long pass: measured together, 2 threads' cheaper long passes would be
    chosen for short ones that 1 thread runs 16x faster (the benchmark's load ~18)."""
    now = [0.0]
    sizes = PassSizes(most=2, clock=lambda: now[0], waited=lambda: 0.0)
    per_pass = {(28, 1): 4.8, (28, 2): 78.0, (2183, 1): 150.8, (2183, 2): 218.1}  # measured (docs/benchmarks.md)
    used = []
    for tokens in (28, 2183, 28, 2183, 28, 28):
        with sizes.batch(tokens) as threads:
            now[0] += per_pass[(tokens, threads)]
        used.append((tokens, threads))
    assert sizes.chooser(28) is not sizes.chooser(2183) and sizes.chooser(20) is sizes.chooser(28)
    assert used == [(28, 1), (2183, 1), (28, 2), (2183, 2), (28, 1), (28, 1)]  # each class tries both, then 1


def test_the_servers_segment_jobs_share_one_chooser_of_forward_batches_across_jobs(monkeypatch):
    """A segment job's forward batches run with the counts of the server's own PassSizes for forwards (kept across
    jobs: each was 3-4 packed batches, and a chooser per job spent one on a try of 2 threads every time), apart from
    the gradient passes' choosers (a forward costs less per token)."""
    with _server_on_two_threads(monkeypatch) as (lm, shared, seen):
        for prompt in ("The capital of France is. Paris is big.", "Two rivers of Europe. The Rhine flows."):
            shared.segment_salience(lm.format_prompt(prompt), " Paris.", inputs.SegmentRequest(
                leave_one_out.NAME, "sentence", None, "filler", None, 0))
    sizes = shared.runs.forward_threads
    assert isinstance(sizes, PassSizes) and sizes is not shared.runs.threads
    used = [n for chooser in sizes.choosers.values() for n in chooser.used]
    assert sorted(used) == sorted(seen) and len(used) >= 4  # every forward, both jobs: unedited + ablated batches
    assert sum(chooser.batches for chooser in sizes.choosers.values()) == len(seen)  # one chooser set for both jobs
