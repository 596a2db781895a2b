"""Time slices (sequence_salience/slices.py): the sizing rule, derived by hand, and matrices assembled
from slices of every size equal the unsliced ones and the independent per-target reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.slices import SliceSizer, batches
from tests.unit.reference import reference_salience
from tests.unit.sizers import ScriptedSizer
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT, TARGET = "Alice has three apples and Bob has two apples;", " together they have five apples."
METHODS = ("grad_norm", "grad_x_input", "integrated_gradients", "smooth_grad")
CONFIG = SalienceConfig(ig_steps=5, ig_rule="riemann_middle", smooth_grad_samples=3, smooth_grad_noise=0.2)


# --------------------------------------------------------------------------- the sizing rule


def test_sizer_takes_as_many_units_as_fit_the_target_time():
    now = [0.0]
    sizer = SliceSizer(0.4, clock=lambda: now[0])
    assert sizer.units(16) == 1  # nothing measured yet: the smallest slice
    sizer.estimate(2, 0.2)  # the forward: 0.1 s per row
    assert sizer.units(16) == 4 and sizer.units(3) == 3
    sizer.record(4, 0.8)  # that slice was slower than estimated: 0.2 s per unit
    assert sizer.units(16) == 2
    sizer.estimate(1, 0.01)  # estimates never override a measured slice
    assert sizer.units(16) == 2
    sizer.record(1, 1.5)  # one unit already exceeds the target: still one unit
    assert sizer.units(16) == 1
    assert sizer.sizes == [4, 1]


def test_chunks_of_targets_are_longer_only_when_backward_passes_pause_inside():
    now = [0.0]
    plain = SliceSizer(0.25, clock=lambda: now[0], chunk_s=2.0)
    plain.record(1, 0.1)  # 0.1 s per target row
    assert plain.units(64) == 2 and plain.chunk_units(64) == 2  # no pauses inside: chunk = slice
    pausing = SliceSizer(0.25, clock=lambda: now[0], between=lambda: None, chunk_s=2.0)
    assert pausing.chunk_units(64) == 4 and pausing.chunk_units(64, rows=3) == 12  # nothing measured: the floor
    assert pausing.chunk_units(2) == 2  # the floor never exceeds the cap (memory)
    pausing.record(1, 0.1)
    assert pausing.units(64) == 2  # steps / samples per forward still follow the slice
    assert pausing.chunk_units(64) == 20 and pausing.chunk_units(7) == 7  # 2.0 s / 0.1 s, capped
    slow = SliceSizer(3.0, clock=lambda: now[0], between=lambda: None, chunk_s=2.0)
    slow.record(1, 0.1)
    assert slow.chunk_units(64) == 30  # never shorter than a slice
    with pytest.raises(ValueError, match="chunk_s"):
        SliceSizer(0.25, chunk_s=0)


def test_a_loaded_machine_keeps_backwards_batched_when_passes_pause_inside():
    # Issue 35: when one target's backward takes longer than chunk_s on the wall clock (a loaded machine),
    # the chunk fell to one target: T backwards of one gradient row each (2.6x the unsliced time measured on
    # the chain-of-thought row). With pauses inside passes (a click does not wait for the chunk) it keeps
    # min_chunk_targets targets.
    now = [0.0]
    pausing = SliceSizer(0.25, clock=lambda: now[0], between=lambda: None, chunk_s=0.5)
    pausing.record(1, 8.0)  # one target row took 8 s: 16x chunk_s
    assert pausing.chunk_units(64) == 4 and pausing.chunk_units(64, rows=2) == 8
    assert SliceSizer(0.25, clock=lambda: now[0], between=lambda: None, min_chunk_targets=6).chunk_units(64) == 6
    plain = SliceSizer(0.25, clock=lambda: now[0])  # no pauses inside: a chunk is a slice, as before
    plain.record(1, 8.0)
    assert plain.chunk_units(64) == 1


def test_batches_follow_the_sizer_and_cover_every_step_once():
    assert [(s.start, s.stop) for s in batches(7, 3)] == [(0, 3), (3, 6), (6, 7)]
    sizer = SliceSizer(1.0)
    got = []
    for sl in batches(7, 3, sizer):
        got.append((sl.start, sl.stop))
        sizer.record(1, 0.5)  # 2 units per second from now on
    assert got == [(0, 1), (1, 3), (3, 5), (5, 7)]


def test_bad_slice_time_is_a_clear_error():
    with pytest.raises(ValueError, match="slice_s=0"):
        SliceSizer(0)


# --------------------------------------------------------------------------- equal results


@pytest.mark.parametrize("script", [pytest.param((1,), id="one-by-one"), pytest.param((2, 1, 3), id="uneven"),
                                    pytest.param((100,), id="capped")])
def test_sliced_matrices_equal_unsliced_and_the_reference(tiny_lm, script):
    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS, config=CONFIG)
    sizer = ScriptedSizer(script)
    sliced = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS, config=CONFIG, slice_s=sizer)
    assert sizer.sizes, "the computation ran in slices"
    for method in METHODS:
        np.testing.assert_allclose(sliced.matrices[method], plain.matrices[method], rtol=1e-5, atol=1e-7,
                                   err_msg=method)
    np.testing.assert_allclose(sliced.extras["grad_gram"], plain.extras["grad_gram"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(sliced.extras["ig_completeness_error"], plain.extras["ig_completeness_error"], rtol=1e-4, atol=1e-6)
    ref = reference_salience(tiny_lm.model, sliced.ids.tolist(), sliced.n_prompt_tokens, ig_steps=CONFIG.ig_steps,
                             keep_gradients=True)
    for method in ("grad_norm", "grad_x_input", "integrated_gradients"):
        np.testing.assert_allclose(sliced.matrices[method], ref[method], rtol=1e-5, atol=1e-7, err_msg=method)
    gram = np.einsum("tld,sld->lts", ref["gradients"], ref["gradients"])  # [N, T, T]
    np.testing.assert_allclose(sliced.extras["grad_gram"], gram, rtol=1e-4, atol=1e-7)


def test_real_clock_slices_give_the_same_matrices(tiny_lm):
    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS, config=CONFIG)
    sliced = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS, config=CONFIG, slice_s=0.05)
    for method in METHODS:
        np.testing.assert_allclose(sliced.matrices[method], plain.matrices[method], rtol=1e-5, atol=1e-7)


def test_progress_runs_after_the_forward_and_after_every_slice():
    """The callback (where the server lets clicks use the model) runs once per slice, the forward included."""
    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    n_targets = len(lm.tokenize(TARGET, add_special_tokens=False).ids)
    sizer = ScriptedSizer((2,))
    seen = []
    ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm",), slice_s=sizer,
                        progress=lambda m, done, total: seen.append(done))
    slices = -(-n_targets // 2)
    assert seen[:2] == [0, 0]  # the method's announcement, then after the forward, before any backward
    assert seen[2:2 + slices] == [min(2 * (k + 1), n_targets) for k in range(slices)]
    assert sizer.sizes == [2] * (n_targets // 2) + [1] * (n_targets % 2)


def test_cancel_stops_after_the_forward_slice():
    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    calls = []
    with pytest.raises(ss.ComputationCancelled):
        ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm",), slice_s=ScriptedSizer((1,)),
                            progress=lambda *a: calls.append(a), cancel=lambda: len(calls) >= 1)
    # the announcement, then the forward's report: stopped before the first backward
    assert calls == [("grad_norm", 0, calls[0][2])] * 2


# --------------------------------------------------------------------------- pauses inside a backward


def _ticking_clock():
    ticks = itertools.count()
    return lambda: float(next(ticks))  # every reading is a second later: each checkpoint is past the target


def test_pauses_inside_each_backward_leave_the_matrices_unchanged(tiny_lm):
    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS, config=CONFIG)
    pauses = []
    sizer = SliceSizer(0.4, clock=_ticking_clock())
    sliced = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=METHODS, config=CONFIG, slice_s=sizer,
                                 between_slices=lambda: pauses.append(1))
    n_layers = tiny_lm.model.config.num_hidden_layers
    assert sizer.pauses == len(pauses) >= len(sizer.sizes) * (n_layers - 1)  # at layer boundaries, every slice
    for method in METHODS:
        np.testing.assert_allclose(sliced.matrices[method], plain.matrices[method], rtol=1e-5, atol=1e-7,
                                   err_msg=method)
    np.testing.assert_allclose(sliced.extras["grad_gram"], plain.extras["grad_gram"], rtol=1e-5, atol=1e-7)


def test_an_urgent_request_pauses_at_the_next_layer_boundary_before_the_slice_ends(tiny_lm):
    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG)
    checks, pauses = [], []
    # The clock never moves: without `urgent` no pause would come (see the test below).
    sizer = SliceSizer(0.4, clock=lambda: 0.0, urgent=lambda: checks.append(1) or len(checks) % 3 == 0)
    sliced = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG, slice_s=sizer,
                                 between_slices=lambda: pauses.append(len(checks)))
    assert len(checks) > 3 and pauses == [k for k in range(1, len(checks) + 1) if k % 3 == 0]
    assert sizer.pauses == len(pauses)
    np.testing.assert_allclose(sliced.matrices["grad_norm"], plain.matrices["grad_norm"], rtol=1e-5, atol=1e-7)


def test_an_urgent_request_during_the_forward_pauses_at_its_next_layer_boundary(tiny_lm):
    """A user job or click that arrives during the matrices' shared forward gets the model at the forward's next
    layer boundary (before: after the whole forward, at the backward's first); the matrices are unchanged."""
    from sequence_salience.methods.gradients import decoder_layers  # pylint: disable=import-outside-toplevel

    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG)
    layers = decoder_layers(tiny_lm.model)
    ran, checks, pauses = [], [], []  # layer forwards so far; urgent's calls; layer forwards done at each pause
    handles = [layer.register_forward_hook(lambda *_: ran.append(1)) for layer in layers]
    try:
        # Urgent once, at the first check: a click arriving just as the job starts. The clock never moves.
        sizer = SliceSizer(0.4, clock=lambda: 0.0, urgent=lambda: checks.append(1) or len(checks) == 1)
        sliced = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG, slice_s=sizer,
                                     between_slices=lambda: pauses.append(len(ran)))
    finally:
        for h in handles:
            h.remove()
    assert len(layers) >= 2
    assert pauses[:1] == [0]  # before the first layer's forward, not after all of them
    assert sizer.pauses == 1
    np.testing.assert_allclose(sliced.matrices["grad_norm"], plain.matrices["grad_norm"], rtol=1e-5, atol=1e-7)


def test_the_forwards_pauses_are_its_own_threads_another_forward_meanwhile_runs_no_hook(tiny_lm):
    """While the matrices' shared forward is paused at a layer boundary (a waiting click runs on another thread), the
    model holds no hook and the other thread's forward runs no pause check (was: a forward pre-hook on every decoder
    layer, run by every thread's forward; `inside.count_hooks` counted them, so tests/integration/test_inside.py had
    to wait for the background matrices); that forward's log-probs are a plain forward's; the matrices are unchanged."""
    import threading  # pylint: disable=import-outside-toplevel

    import torch  # pylint: disable=import-outside-toplevel

    from sequence_salience.inside import count_hooks  # pylint: disable=import-outside-toplevel
    from sequence_salience.methods import gradients  # pylint: disable=import-outside-toplevel
    from sequence_salience.salience import build_inputs, prepare_pair  # pylint: disable=import-outside-toplevel

    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG)
    pair = prepare_pair(tiny_lm, PROMPT, TARGET)
    inputs = build_inputs(tiny_lm, [(pair.prompt.ids, pair.target_ids)])
    with torch.no_grad():
        want = gradients.target_logprobs(inputs, inputs.embeds)
    me = threading.get_ident()
    checks, during = [], {}  # the threads that ran the pause check; what the paused forward's pause saw
    sizer = SliceSizer(0.4, clock=lambda: 0.0, urgent=lambda: len(checks) == 1)
    own_check = sizer.urgent_checkpoint

    def checkpoint() -> None:
        checks.append(threading.get_ident())
        own_check()

    sizer.urgent_checkpoint = checkpoint

    def click() -> None:  # another thread's work while the forward is paused (the server's waiting click)
        with torch.no_grad():
            during["logp"] = gradients.target_logprobs(inputs, inputs.embeds)

    def between() -> None:
        if "hooks" not in during:
            during["hooks"] = count_hooks(tiny_lm.model)
            other = threading.Thread(target=click)
            other.start()
            other.join()

    sliced = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG, slice_s=sizer,
                                 between_slices=between)
    assert sizer.pauses >= 1 and during["hooks"] == 0  # was: one per decoder layer (and the head's cut)
    assert set(checks) == {me}  # was: the other thread's forward ran the check at each of its layers
    torch.testing.assert_close(during["logp"], want, rtol=0, atol=1e-6)
    assert count_hooks(tiny_lm.model) == 0
    assert not any("forward" in vars(layer) for layer in gradients.decoder_layers(tiny_lm.model))  # unwrapped after
    np.testing.assert_allclose(sliced.matrices["grad_norm"], plain.matrices["grad_norm"], rtol=1e-5, atol=1e-7)


def test_no_pause_before_the_slice_ends_when_nothing_is_urgent(tiny_lm):
    pauses = []
    sizer = SliceSizer(0.4, clock=lambda: 0.0, urgent=lambda: False)
    ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm",), config=CONFIG, slice_s=sizer,
                        between_slices=lambda: pauses.append(1))
    assert pauses == [] and sizer.pauses == 0


def test_gradient_matrices_on_a_loaded_machine_take_a_quarter_of_the_backwards(tiny_lm):
    # Every clock reading a second later: each target's backward looks 2x longer than chunk_s, as on a
    # loaded machine. Before issue 35's fix each backward did one target (sizes == [1] * T).
    sizer = SliceSizer(0.4, clock=_ticking_clock())
    result = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"), config=CONFIG,
                                 slice_s=sizer, between_slices=lambda: None)
    t = result.num_targets
    assert t >= 5
    assert sizer.sizes == [4] * (t // 4) + ([t % 4] if t % 4 else [])  # ceil(T / 4) backwards
    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"), config=CONFIG)
    for method in ("grad_norm", "grad_x_input"):
        np.testing.assert_allclose(result.matrices[method], plain.matrices[method], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("method", ["grad_norm", "integrated_gradients"])
def test_a_cancel_during_a_pause_inside_a_backward_stops_there(tiny_lm, method):
    """A job cancelled while its backward is paused (the user selected another prompt) stops at that layer
    boundary, not after the rest of its batched backward; the model then computes the same matrices as before."""
    plain = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=(method,), config=CONFIG)
    pauses, done = [], []
    cancelled = lambda: len(pauses) >= 2  # noqa: E731  (set during the second pause)
    with pytest.raises(ss.ComputationCancelled, match="inside a backward"):
        ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=(method,), config=CONFIG,
                            slice_s=SliceSizer(0.4, clock=_ticking_clock()), between_slices=lambda: pauses.append(1),
                            progress=lambda m, d, t: done.append(d), cancel=cancelled)
    assert len(pauses) == 2  # no pause ran after the cancel
    # no target (or IG step) was completed: 0 only (the announcement, then the forward's report)
    assert done == [0, 0]
    again = ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=(method,), config=CONFIG,
                                slice_s=SliceSizer(0.4, clock=_ticking_clock()), between_slices=lambda: None)
    np.testing.assert_allclose(again.matrices[method], plain.matrices[method], rtol=1e-5, atol=1e-7)


def test_a_click_computed_on_another_thread_during_a_pause_changes_neither_result():
    """What the server does: at a pause inside the background backward, another thread uses the model."""
    import threading

    lm = wrap(MODEL_BUILDERS["llama"](seed=0), "llama")
    plain = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"))
    alone = ss.compute_span_result(lm, PROMPT, TARGET, t0=1, t1=4)
    clicks = []

    def click():
        if len(clicks) < 3:
            t = threading.Thread(target=lambda: clicks.append(ss.compute_span_result(lm, PROMPT, TARGET, t0=1, t1=4)))
            t.start()
            t.join()

    sliced = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"),
                                 slice_s=SliceSizer(0.4, clock=_ticking_clock()), between_slices=click)
    assert len(clicks) == 3
    for method in ("grad_norm", "grad_x_input"):
        np.testing.assert_allclose(sliced.matrices[method], plain.matrices[method], rtol=1e-5, atol=1e-7)
        for got in clicks:
            np.testing.assert_allclose(got.span_salience(method, 1, 4), alone.span_salience(method, 1, 4),
                                       rtol=1e-5, atol=1e-7)


def test_no_pause_on_another_thread():
    """checkpoint() only pauses the thread that started the computation (an accelerator's backward
    runs on the autograd engine's own thread)."""
    import threading

    calls = []
    sizer = SliceSizer(0.4, clock=_ticking_clock(), between=lambda: calls.append(1))
    sizer.start()
    t = threading.Thread(target=sizer.checkpoint)
    t.start()
    t.join()
    assert calls == []
    sizer.checkpoint()
    assert calls == [1]


# --------------------------------------------------------------------------- progress inside a backward


@pytest.mark.parametrize("method", ["grad_norm", "integrated_gradients", "smooth_grad"])
def test_each_backward_reports_its_layers_and_its_units_in_the_methods_progress_units(tiny_lm, method):
    """`inside(share, units)` at each layer boundary of every batched backward: shares 0, 1/n, ..., (n-1)/n of the
    model's n layers (the first boundary before any layer's backward), and the units of the backwards add up to the
    method's progress total (targets; IG: target x step; SmoothGrad: targets, each its samples' rows), each once.
    The computation's first forward, no unit, reports its layers as the pass ahead of the units (`ahead=True`), once."""
    readings, forward = [], []
    sizer = SliceSizer(0.4, clock=_ticking_clock(), inside=lambda share, units, ahead=False: (
        forward if ahead else readings).append((share, units)))
    reported = []
    ss.compute_salience(tiny_lm, PROMPT, TARGET, methods=(method,), config=CONFIG, slice_s=sizer,
                        between_slices=lambda: None, progress=lambda m, d, t: reported.append((d, t)))
    n = tiny_lm.model.config.num_hidden_layers
    assert [share for share, _ in forward] == pytest.approx([k / n for k in range(n)])
    assert len({units for _, units in forward}) == 1
    backwards = [readings[k:k + n] for k in range(0, len(readings), n)]
    assert len(readings) == n * len(backwards) and len(backwards) >= 2
    for one in backwards:
        assert [share for share, _ in one] == pytest.approx([k / n for k in range(n)])
        assert len({units for _, units in one}) == 1
    total = reported[-1][1]
    assert total == ss.get_method(method).progress_total(len(tiny_lm.tokenize(TARGET, add_special_tokens=False).ids),
                                                         CONFIG)
    assert sum(one[0][1] for one in backwards) == pytest.approx(total)


def test_a_methods_rows_per_unit_count_inside_its_block_only():
    """`counting(rows)`: within it a backward of 8 rows reports 8 / 4 = 2 units (a SmoothGrad target of 4 samples'
    rows), after it 8 (one row a unit): the rows per unit are the computing method's, never left set on the sizer
    (review note, session 40: they were an attribute the core set after construction)."""
    readings = []
    sizer = SliceSizer(0.4, clock=_ticking_clock(), inside=lambda share, units: readings.append((share, units)))
    with sizer.counting(4):
        sizer.backward_begins(8, 2)
        sizer.hook(None)
        sizer.hook(None)
    sizer.backward_begins(8, 2)
    sizer.hook(None)
    assert readings == [(0.0, 2.0), (0.5, 2.0), (0.0, 8.0)]
