"""Span-first results, cancellation between chunks and length-aware chunking (issue 10's core)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience.methods.base import SalienceConfig
from tests.unit.reference import reference_salience

PROMPT, TARGET = "Alice has three apples and Bob has two apples;", " together they have five apples."
METHODS = ("grad_norm", "grad_x_input", "integrated_gradients")  # those with a per-target reference
CONFIG = SalienceConfig(ig_steps=6, ig_rule="riemann_middle", target_chunk_size=2, ig_step_chunk_size=2)


_REFERENCES: dict[str, dict] = {}


def _reference(lm, result) -> dict:
    """The per-target reference loop, once per tiny model (it is the slow part)."""
    if lm.name not in _REFERENCES:
        _REFERENCES[lm.name] = reference_salience(lm.model, result.ids.tolist(), result.n_prompt_tokens,
                                                  ig_steps=6, keep_gradients=True)
    return _REFERENCES[lm.name]


@pytest.mark.parametrize("span", [(0, None), (1, 3), (2, 3)])
def test_span_result_equals_rows_of_the_independent_reference(tiny_lm, span):
    """Span values from one shared backward == the per-target reference loop summed over the span."""
    result = ss.compute_span_result(tiny_lm, PROMPT, TARGET, methods=METHODS, t0=span[0], t1=span[1],
                                    config=CONFIG)
    t0, t1 = span[0], span[1] if span[1] is not None else result.num_targets
    assert result.matrices == {}
    ref = _reference(tiny_lm, result)
    np.testing.assert_allclose(result.target_logprobs, ref["logp"], rtol=1e-5)
    for method in ("grad_x_input", "integrated_gradients"):  # linear: sum of the reference rows
        np.testing.assert_allclose(result.span_salience(method, t0, t1), ref[method][t0:t1].sum(0),
                                   rtol=1e-4, atol=1e-6, err_msg=method)
    # grad_norm: the norm of the summed per-target gradient vectors
    expected = np.linalg.norm(ref["gradients"][t0:t1].sum(0), axis=-1)
    np.testing.assert_allclose(result.span_salience("grad_norm", t0, t1), expected, rtol=1e-4, atol=1e-6)
    # IG completeness error of the span is the sum of the reference's per-token deltas
    np.testing.assert_allclose(result.span_ig_errors[(t0, t1)], ref["ig_delta"][t0:t1].sum(), rtol=1e-3, atol=1e-5)
    assert result.has_span("grad_norm", t0, t1)
    assert not result.has_span("grad_norm", 0, 1)


def test_partial_result_merges_with_the_full_result(tiny_lm):
    quick = ss.compute_span_result(tiny_lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"), config=CONFIG)
    full = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"), config=CONFIG)
    merged = quick.merged(full)
    t = full.num_targets
    for method in ("grad_norm", "grad_x_input"):
        np.testing.assert_allclose(quick.span_salience(method, 0, t), full.span_salience(method, 0, t),
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(merged.matrices[method], full.matrices[method])
        assert merged.has_span(method, 1, 2) and not quick.has_span(method, 1, 2)


@pytest.mark.parametrize("method", ["grad_norm", "integrated_gradients"])
def test_cancel_stops_after_the_first_chunk(tiny_lm, method):
    calls = []

    def progress(name, done, total):
        calls.append((name, done, total))

    with pytest.raises(ss.ComputationCancelled):
        ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=(method,), config=CONFIG, progress=progress,
                            cancel=lambda: any(done for _name, done, _total in calls))
    # its announcement (0 of its units), then stopped right after the first chunk, not at the end
    assert len(calls) == 2 and calls[0][1] == 0, calls
    _, done, total = calls[1]
    assert done < total


def test_cancel_before_start_does_no_work(tiny_lm):
    with pytest.raises(ss.ComputationCancelled):
        ss.compute_span_result(tiny_lm, PROMPT, TARGET, config=CONFIG, cancel=lambda: True)


def test_results_do_not_depend_on_the_token_budget(tiny_lm):
    """A tiny budget forces one target per backward and one IG step per forward: same numbers."""
    methods = METHODS
    wide = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=methods, config=CONFIG)
    narrow_config = SalienceConfig(ig_steps=6, ig_rule="riemann_middle", chunk_token_budget=1)
    narrow = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=methods, config=narrow_config)
    for method in methods:
        np.testing.assert_allclose(narrow.matrices[method], wide.matrices[method], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("seq_len,rows,expected", [(100, 1, 16), (4096, 1, 2), (8000, 1, 1), (512, 8, 2)])
def test_targets_per_chunk_shrinks_with_length(seq_len, rows, expected):
    assert SalienceConfig().targets_per_chunk(seq_len, rows) == expected


def test_progress_of_a_long_input_comes_in_small_chunks(tiny_lm):
    """With a budget of 2 targets' worth of tokens, progress arrives every 2 targets (after the announcement, 0)."""
    n = len(tiny_lm.encode_prompt(PROMPT).ids) + len(tiny_lm.tokenize(TARGET).ids)
    config = SalienceConfig(chunk_token_budget=2 * n)
    seen = []
    ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=config,
                        progress=lambda m, d, t: seen.append(d))
    assert seen[:3] == [0, 2, 4]


_EXIT_SCRIPT = '''
import sys, time
import sequence_salience as ss
from lit_app.model import progressive
from sequence_salience.methods.base import SalienceConfig
from tests.unit.tiny_models import tiny_llama, wrap

lm = wrap(tiny_llama(0), "llama")
jobs = progressive.DetailJobs()

def run(job):
    while True:  # until cancelled: a job that is inside torch most of the time
        ss.compute_salience(lm, "The capital of France is " * 4, " Paris. The capital of Italy is Rome.",
                            config=SalienceConfig(target_chunk_size=1), progress=lambda *a: job.report(1, 2),
                            cancel=job.should_stop)

job = jobs.submit("g", "grad", run)
while job.state != progressive.RUNNING:
    time.sleep(0.01)
time.sleep(0.3)
print("main thread returns while the job runs", flush=True)
'''


def test_interpreter_exit_while_a_job_runs_is_clean():
    """A background job inside torch when the process exits (a test run, a stopped server)
    is cancelled and waited for at exit; without that the daemon worker aborts the process
    ("terminate called without an active exception", exit code 134) after a clean run."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], cwd=root, capture_output=True, text=True, timeout=300)
    assert "main thread returns" in out.stdout, out.stderr[-2000:]
    assert out.returncode == 0, out.stderr[-2000:]
    assert "terminate called" not in out.stderr
