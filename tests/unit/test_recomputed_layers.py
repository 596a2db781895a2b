"""A forward whose graph a backward needs keeps each decoder layer's input, not its activations (issue 43's soak).

sequence_salience/methods/gradients.py `layers_recomputed`: every graph-keeping forward (`target_logprobs` with
gradients on: clicks' spans, IG and SmoothGrad points, per-token matrices) runs each decoder layer under
torch.utils.checkpoint, so between the forward and its backward(s) nothing computed inside a layer is held, and the
backward runs the layer again. On the default model that is most of the ~1 MB per row-token a graph held
(docs/benchmarks.md, "Session 34 (h1)"). A pass with one backward (`weighted_gradient`) also holds each layer's
attention kernel output, which that run takes instead of running the kernel (the last test). The gradients must not
change: they are compared bit for bit with plain autograd through the model (the reference here does not go through
the library's gradient code).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sequence_salience.methods import gradients
from sequence_salience.salience import build_inputs

PROMPTS = [(list(range(5, 25)), list(range(30, 36))), (list(range(7, 19)), list(range(40, 44)))]


def _inputs(lm):
    return build_inputs(lm, PROMPTS)


def _tensors(values) -> list[torch.Tensor]:
    """The tensors among a call's arguments (nested in tuples and lists too)."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            out.extend(_tensors(v))
    return out


def _activations_saved_in_layers(lm, fn) -> int:
    """Bytes the autograd graph saves while a decoder layer's forward runs, other than the layer's own inputs
    (its activations), during fn()."""
    inputs, saved = [], [0]  # the running layers' input storages; bytes
    params = {p.untyped_storage().data_ptr() for p in lm.model.parameters()}
    layers = max((m for m in lm.model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)

    def enter(_module, args, kwargs):
        inputs.append({t.untyped_storage().data_ptr() for t in _tensors([*args, *kwargs.values()])})

    handles = [layer.register_forward_pre_hook(enter, with_kwargs=True) for layer in layers]
    def leave(*_):
        inputs.pop()

    handles += [layer.register_forward_hook(leave) for layer in layers]

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if inputs and ptr not in params and ptr not in inputs[-1]:
            saved[0] += t.untyped_storage().nbytes()
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
    finally:
        for h in handles:
            h.remove()
    return saved[0]


def _reference(lm, inputs, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(targets) and d(sum weights * log p)/d embeds by plain autograd through the model (no recomputation)."""
    e = inputs.embeds.detach().requires_grad_(True)
    with torch.enable_grad():
        logits = lm.model(inputs_embeds=e, attention_mask=inputs.attention_mask, position_ids=inputs.position_ids,
                          use_cache=False).logits  # [M, L, V]
        logp = logits.log_softmax(-1)
        pred = (inputs.target_positions - 1).clamp(min=0)
        rows = torch.arange(logp.shape[0])[:, None]
        target_logp = logp[rows, pred, inputs.target_ids] * inputs.target_mask  # [M, T]
        (g,) = torch.autograd.grad((target_logp * weights).sum(), e)
    return target_logp.detach(), g


def test_a_graph_keeping_forward_keeps_only_the_layers_inputs(tiny_lm):
    inputs = _inputs(tiny_lm)
    e = inputs.embeds.detach().requires_grad_(True)
    with torch.enable_grad():
        plain = _activations_saved_in_layers(tiny_lm, lambda: tiny_lm.model(inputs_embeds=e, use_cache=False))
        ours = _activations_saved_in_layers(tiny_lm, lambda: gradients.target_logprobs(inputs, e))
    assert plain > 0  # the probe sees a plain forward's activations (before the change, ours too)
    assert ours == 0
    assert all("forward" not in vars(layer) for layer in gradients.decoder_layers(tiny_lm.model))  # unwrapped after


def test_the_layers_found_are_the_decoder_layers(tiny_lm):
    layers = gradients.decoder_layers(tiny_lm.model)
    assert len(layers) == tiny_lm.model.config.num_hidden_layers == 2
    assert type(layers[0]).__name__ in ("LlamaDecoderLayer", "GPT2Block")


def test_gradients_are_those_of_plain_autograd(tiny_lm):
    inputs = _inputs(tiny_lm)
    weights = torch.rand(inputs.target_ids.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ref_logp, ref_g = _reference(tiny_lm, inputs, weights)
    logp, g = gradients.weighted_gradient(inputs, inputs.embeds, weights)
    torch.testing.assert_close(logp, ref_logp.float(), rtol=0, atol=1e-6)
    torch.testing.assert_close(g, ref_g.float(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backward", ["vmap", "loop"])
def test_per_target_gradients_are_those_of_plain_autograd(tiny_lm, backward):
    inputs = _inputs(tiny_lm)
    _, g = gradients.per_target_gradients(inputs, inputs.embeds, chunk_size=4, backward=backward)  # [T, M, L, D]
    for t in range(inputs.target_ids.shape[1]):
        one = torch.zeros(inputs.target_ids.shape, dtype=torch.float64)
        one[:, t] = 1.0
        _, ref_g = _reference(tiny_lm, inputs, one)
        torch.testing.assert_close(g[t], ref_g.float(), rtol=1e-5, atol=1e-7)


def test_a_forward_without_gradients_is_as_before(tiny_lm):
    inputs = _inputs(tiny_lm)
    with torch.no_grad():
        ours = gradients.target_logprobs(inputs, inputs.embeds)
    ref_logp, _ = _reference(tiny_lm, inputs, torch.ones(inputs.target_ids.shape, dtype=torch.float64))
    torch.testing.assert_close(ours, ref_logp.float(), rtol=0, atol=1e-6)


def test_a_pass_of_another_thread_while_the_hooks_are_on_keeps_its_whole_graph(tiny_lm):
    """The cut at the head (a pre-hook on the shared model's output embedding) and the wrapped layers are the calling
    thread's: another thread's gradient pass on the same weights, run while they are registered (two server objects
    on one model: test_span_progress's second test failed with "not used in the graph"), gets plain autograd's
    gradient, and this thread's cut still happens."""
    import threading

    inputs = _inputs(tiny_lm)
    weights = torch.ones(inputs.target_ids.shape, dtype=torch.float64)
    _, ref_g = _reference(tiny_lm, inputs, weights)
    seen: dict[str, object] = {}

    def other() -> None:
        try:
            seen["g"] = gradients.weighted_gradient(inputs, inputs.embeds, weights)[1]
        except Exception as e:  # noqa: BLE001 - reported below
            seen["error"] = e

    me = threading.get_ident()

    def start_other(_module, _args) -> None:  # inside this thread's forward, before its head: its hooks registered
        if threading.get_ident() == me and "g" not in seen and "error" not in seen:
            t = threading.Thread(target=other)
            t.start()
            t.join()

    handle = gradients.decoder_layers(tiny_lm.model)[0].register_forward_pre_hook(start_other)
    e = inputs.embeds.detach().requires_grad_(True)
    try:
        with torch.enable_grad():
            _, root, root_grads = gradients.logprobs_cut_at_head(inputs, e)
    finally:
        handle.remove()
    assert "error" not in seen, seen.get("error")
    torch.testing.assert_close(seen["g"], ref_g.float(), rtol=1e-5, atol=1e-7)
    assert root_grads is not None  # this thread's forward was cut at the head


def test_a_pass_that_keeps_its_cache_recomputes_its_layers_and_keeps_each_layers_keys_once(tiny_lm):
    """The first highlight's recorded pass (`on_cache`: it keeps the unedited prompt's keys and values) recomputes its
    layers as every other graph-keeping forward (it ran them once, keeping every activation: ~1.5 MB per token on the
    default model, the 10-minute soak's peak +44.5 %). Its cache holds each layer's keys and values once (not again
    for the backward's run), equal to a forward's without gradients; its gradients are those of a pass that keeps
    no cache, bit for bit."""
    inputs = build_inputs(tiny_lm, PROMPTS[:1])
    weights = torch.rand(inputs.target_ids.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    kept: list = []
    e = inputs.embeds.detach().requires_grad_(True)
    with torch.enable_grad():
        saved = _activations_saved_in_layers(tiny_lm, lambda: gradients.target_logprobs(inputs, e, on_cache=kept.append))
    assert saved == 0
    kept.clear()
    logp, g = gradients.weighted_gradient(inputs, inputs.embeds, weights, on_cache=kept.append)
    plain_logp, plain_g = gradients.weighted_gradient(inputs, inputs.embeds, weights)
    assert torch.equal(g, plain_g) and torch.equal(logp, plain_logp)
    _, ref_g = _reference(tiny_lm, inputs, weights)
    torch.testing.assert_close(g, ref_g.float(), rtol=1e-5, atol=1e-7)
    with torch.no_grad():
        want = gradients.cache_layers(gradients.returned_cache(tiny_lm.model(
            inputs_embeds=inputs.embeds, position_ids=inputs.position_ids, use_cache=True)))
    got = gradients.cache_layers(kept[0])
    assert len(got) == len(want) == len(gradients.decoder_layers(tiny_lm.model))
    for (k, v), (want_k, want_v) in zip(got, want):
        assert k.shape == want_k.shape and k.shape[-2] == inputs.embeds.shape[1]  # once, not again for the backward
        torch.testing.assert_close(k, want_k, rtol=0, atol=1e-6)
        torch.testing.assert_close(v, want_v, rtol=0, atol=1e-6)


def test_the_backwards_run_of_a_layer_passes_its_keys_and_values_through_uncopied(tiny_lm, monkeypatch):
    """Session 35's leftover: the recorded pass's cache answered each layer's second run (the backward's
    recomputation) with a deep copy of an empty layer, which concatenated the keys and values to nothing (a copy of
    each). Now that run gets the very tensors it gave, and the cache keeps the first run's (gradients bit for bit:
    the test above)."""
    made = []
    original = gradients.kept_once_cache

    def recording(model):
        cache = original(model)
        update, calls = cache.update, []

        def recorded(k, v, layer_idx, *a, **kw):
            out = update(k, v, layer_idx, *a, **kw)
            calls.append((layer_idx, k, v, out))
            return out

        cache.update = recorded
        made.append(calls)
        return cache

    monkeypatch.setattr(gradients, "kept_once_cache", recording)
    inputs = build_inputs(tiny_lm, PROMPTS[:1])
    weights = torch.rand(inputs.target_ids.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    kept: list = []
    gradients.weighted_gradient(inputs, inputs.embeds, weights, on_cache=kept.append)
    [calls] = made
    n_layers = len(gradients.decoder_layers(tiny_lm.model))
    assert [c[0] for c in calls[:n_layers]] == list(range(n_layers))  # the forward
    assert sorted(c[0] for c in calls[n_layers:]) == list(range(n_layers))  # the backward's recomputation
    stored = gradients.cache_layers(kept[0])
    for layer_idx, k, v, (out_k, out_v) in calls[n_layers:]:
        assert out_k is k and out_v is v  # was: new tensors, a concatenation to an empty layer's copy
        assert stored[layer_idx][0] is not k  # the cache keeps the first run's keys, not the recomputed ones


# The fused attention kernels (torch's scaled-dot-product attention; the tiny models run the CPU one).
ATTENTION_KERNELS = gradients.KEPT_IN_RECOMPUTATION


class _AttentionKernels(TorchDispatchMode):
    """Counts the runs of a fused attention kernel inside the block; a kernel output that the recomputation takes
    from the forward is no run."""

    def __init__(self):
        super().__init__()
        self.runs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in ATTENTION_KERNELS:
            self.runs += 1
        return func(*args, **(kwargs or {}))


def test_the_backwards_run_of_a_layer_takes_its_attention_from_the_forward(tiny_lm, monkeypatch):
    """Session 42 (h4): the backward ran each layer's forward again, attention included: on the default model at
    4,099 tokens that second run was 49 of the first highlight's 204 s of CPU, half of it attention (quadratic in the
    length). Now a pass with one backward (`weighted_gradient`) keeps each layer's attention kernel output from the
    forward: its kernels run once per layer (was twice: the forward, then the backward's run of the layer), and the
    gradients are those of the plain recomputation, bit for bit."""
    inputs = _inputs(tiny_lm)
    weights = torch.rand(inputs.target_ids.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    n_layers = len(gradients.decoder_layers(tiny_lm.model))
    with _AttentionKernels() as kept:
        logp, g = gradients.weighted_gradient(inputs, inputs.embeds, weights)
    monkeypatch.setattr(gradients, "KEPT_IN_RECOMPUTATION", ())  # the plain recomputation, as before
    with _AttentionKernels() as plain:
        plain_logp, plain_g = gradients.weighted_gradient(inputs, inputs.embeds, weights)
    assert plain.runs == 2 * n_layers  # the probe sees the backward's second run of each layer's kernel
    assert kept.runs == n_layers  # was 2 * n_layers
    assert torch.equal(logp, plain_logp) and torch.equal(g, plain_g)
