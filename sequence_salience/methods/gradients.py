"""Target log-probabilities and their gradients w.r.t. input embeddings, for all targets at once.

One forward pass computes log p(target_t | prefix) for every target token t; one
batched backward (torch.autograd.grad with is_grads_batched, i.e. vmap over the
backward) then gives each target's gradient, in chunks of target tokens so that
memory stays bounded. No per-target forward passes.

Memory (issue 43's soak): a forward whose graph a backward needs keeps only each decoder layer's input and
the backward runs the layer again (`layers_recomputed`), and the per-target backwards start at the output
embedding's input, not at the log-probs (`logprobs_cut_at_head`): no chunk of targets carries vocabulary-sized
gradients. The gradients are those of plain autograd (tests/unit/test_recomputed_layers.py); a click's pass
peaked at 2.3x less memory and a matrix chunk at 3x less, each pass costing about one forward more
(docs/benchmarks.md, "Session 34 (h1)"). A pass with one backward (`weighted_gradient`) also keeps each layer's
attention kernel output, so that run skips attention, the part that grows with the square of the length
(`KEPT_IN_RECOMPUTATION`, "Session 42 (h4)").
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import logging
import warnings
import weakref
from collections.abc import Callable, Iterator

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from sequence_salience.errors import SalienceError
from sequence_salience.methods.base import ModelInputs
from sequence_salience.slices import SliceSizer

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def supports_logits_to_keep(model_cls: type) -> bool:
    """Whether the model class's forward takes `logits_to_keep` (only the last K positions' logits)."""
    return "logits_to_keep" in inspect.signature(model_cls.forward).parameters


# Each model's decoder layers, found once per model and held weakly.
_LAYERS: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[torch.nn.Module, ...]]" = weakref.WeakKeyDictionary()


def decoder_layers(model: torch.nn.Module) -> tuple[torch.nn.Module, ...]:
    """The model's decoder layers: its longest list of modules of one class (Llama's `model.layers`, GPT-2's
    `transformer.h`), or () when it has none."""
    if model not in _LAYERS:
        lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0
                 and len({type(layer) for layer in m}) == 1]
        _LAYERS[model] = tuple(max(lists, key=len)) if lists else ()
    return _LAYERS[model]


# This thread's settings for the wrapped modules' forwards (`_wrapped`): `recompute` (how many `layers_recomputed`
# blocks it is inside), `pause` (`layer_pauses`' checkpoint), `cut` (`logprobs_cut_at_head`'s detach of the output
# embedding's input). Nothing is registered on the shared model for them: another thread's forward through a wrapped
# module finds none of this thread's settings and runs the module's own forward (no hook, no pause check).
_LOCAL = threading.local()
# Each wrapped module's count of the blocks (of any thread) its wrapper serves, and the instance `forward` it had
# before (None: the class's); the wrapper is removed when the last block ends.
_WRAPS: "weakref.WeakKeyDictionary[torch.nn.Module, list]" = weakref.WeakKeyDictionary()
_WRAPS_LOCK = threading.Lock()


@contextlib.contextmanager
def _wrapped(modules: tuple[torch.nn.Module, ...], wrapper: Callable) -> Iterator[None]:
    """Within it, each module's forward runs as `wrapper(its forward, *args, **kwargs)` (an instance attribute, not a
    hook: `inside.count_hooks` never sees it), kept while any thread's block needs it."""
    with _WRAPS_LOCK:
        for m in modules:
            if m not in _WRAPS:
                _WRAPS[m] = [0, vars(m).get("forward")]
                m.forward = functools.partial(wrapper, m.forward)
            _WRAPS[m][0] += 1
    try:
        yield
    finally:
        with _WRAPS_LOCK:
            for m in modules:
                _WRAPS[m][0] -= 1
                if _WRAPS[m][0] == 0:
                    own = _WRAPS.pop(m)[1]
                    if own is None:
                        del m.forward
                    else:
                        m.forward = own


@contextlib.contextmanager
def _this_thread(**settings) -> Iterator[None]:
    """`_LOCAL`'s settings for this thread within the block, restored after it."""
    before = {k: getattr(_LOCAL, k, None) for k in settings}
    for k, v in settings.items():
        setattr(_LOCAL, k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            setattr(_LOCAL, k, v)


def _layer_forward(forward: Callable, *args, **kwargs):
    """A decoder layer's forward, as this thread's settings say: first `layer_pauses`' checkpoint; with gradients on
    inside `layers_recomputed`, keeping only its inputs for the backward, which runs it again (its own forward, so
    no pause there). Another thread's forward (without settings) runs as it is: a pass on the same weights may keep a
    key/value cache, which a layer run again would extend twice."""
    pause = getattr(_LOCAL, "pause", None)
    if pause is not None:
        pause()
    if not getattr(_LOCAL, "recompute", 0) or not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    if not KEPT_IN_RECOMPUTATION or not getattr(_LOCAL, "one_backward", False):
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, context_fn=_attention_kept, **kwargs)


# The attention kernels whose outputs a recomputed layer keeps from its forward (torch's fused scaled-dot-product
# attention, CPU and GPU): the backward's run of the layer takes them instead of running the kernel again. At long
# prompts attention is the quadratic part of a layer: on the default model at 4,099 tokens (one thread) the first
# highlight's pass was forward 59 s, backward 145 s, and of the backward 49 s the layers' second run, half of it
# attention (docs/benchmarks.md, "Session 42 (h4)"). What it keeps per layer is the kernel's output (as many floats
# per token as the layer's input, 576 on the default model) and its log-sum-exp (one per head and token). Empty: the
# plain recomputation (benchmarks/bench_attention_kept.py measures both). Only in a pass with one backward
# (`weighted_gradient`: a first highlight, a clicked span, a batch of IG steps or SmoothGrad samples): torch's selective
# checkpoint hands each kept output to one backward, and the per-target matrices run a backward per chunk of targets
# over one forward (they recompute as before).
KEPT_IN_RECOMPUTATION: tuple = tuple(getattr(torch.ops.aten, name) for name in (
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
    if hasattr(torch.ops.aten, name))


def _keep_attention(_ctx, op, *_args, **_kwargs):
    kept = op.overloadpacket in KEPT_IN_RECOMPUTATION
    return CheckpointPolicy.MUST_SAVE if kept else CheckpointPolicy.PREFER_RECOMPUTE


def _attention_kept():
    """torch.utils.checkpoint's selective contexts: the layer's attention kernel outputs kept, the rest run again."""
    return create_selective_checkpoint_contexts(_keep_attention)


@contextlib.contextmanager
def layers_recomputed(model: torch.nn.Module) -> Iterator[None]:
    """Within it, a forward of this thread whose graph a backward needs keeps each decoder layer's input, not its
    activations, and the backward runs each layer's forward again (torch.utils.checkpoint): the same gradients, bit
    for bit, for the layers' inputs instead of their activations between the forward and the backward (on the
    default model 576 of ~7,300 floats per token and layer), at the cost of one more forward per backward. In a pass
    with one backward (`weighted_gradient`) a layer also keeps its attention kernel's output, which that run takes
    instead of running the kernel (`KEPT_IN_RECOMPUTATION`: another 576 floats per token and layer). Other threads'
    forwards are left as they are."""
    with _wrapped(decoder_layers(model), _layer_forward), \
            _this_thread(recompute=(getattr(_LOCAL, "recompute", None) or 0) + 1):
        yield


@functools.lru_cache(maxsize=None)
def cache_argument(model_cls: type) -> str:
    """The forward's name for a key/value cache: "cache" (transformers >= 5.25), else "past_key_values"."""
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def returned_cache(out):
    """The key/value cache a forward's output holds (`cache`, or `past_key_values` before transformers 5.25)."""
    return getattr(out, "cache", None) if getattr(out, "cache", None) is not None else getattr(out, "past_key_values", None)


def kept_once_cache(model: torch.nn.Module):
    """A transformers DynamicCache for one graph-keeping forward under `layers_recomputed`: it keeps each layer's keys
    and values the first time the layer runs; when the layer runs again in the backward (torch.utils.checkpoint) it
    passes that run's keys and values through as they are, and keeps nothing: what an empty layer answers (its
    concatenation to nothing; a sliding-window layer's too: its window holds the whole first pass) without copying
    them, so the same values and the same gradients, bit for bit (the concatenation's gradient is the identity). A
    plain cache would append that layer's keys and values a second time and attend over both."""
    from transformers import DynamicCache  # pylint: disable=import-outside-toplevel

    class KeptOnce(DynamicCache):
        def __init__(self, config):
            super().__init__(config=config)
            self.ran: set[int] = set()

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            if layer_idx in self.ran:  # the layer run again (the backward's recomputation): a pass-through
                return key_states, value_states
            self.ran.add(layer_idx)
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    return KeptOnce(model.config)


def cache_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Per layer (keys, values) <[1, Hkv, N, Dh]> of a transformers DynamicCache whose every layer is a plain
    (full-attention) key/value layer; None for another cache (sliding-window or recurrent layers, older
    transformers)."""
    layers = getattr(cache, "layers", None)
    plain = bool(layers) and all(type(layer).__name__ == "DynamicLayer" and getattr(layer, "keys", None) is not None
                                 for layer in layers)
    return [(layer.keys, layer.values) for layer in layers] if plain else None


def target_logprobs(inputs: ModelInputs, embeds: torch.Tensor,
                    on_hidden: Callable[[tuple[torch.Tensor, ...]], None] | None = None,
                    on_cache: Callable[[object], None] | None = None) -> torch.Tensor:
    """log p(target_t | tokens before it) for every target token.

    Args:
      inputs: the batch (masks, positions, target ids); its batch size M must match embeds.
      embeds: <float>[M, L, D] input embeddings (may require grad).
      on_hidden: optional; called with the model's hidden states (each <float>[M, L, D], one
        per layer boundary) of this forward, e.g. to register gradient hooks on them.
      on_cache: optional; the forward keeps its key/value cache and this is called with it (the unedited
        prompt's keys and values, which a segment method's ablations reuse: ablation/prefix.py UneditedForward).
    Returns:
      <float32>[M, T], zero where target_mask is False.
    """
    model = inputs.model
    seq_len = embeds.shape[1]
    pred_pos = (inputs.target_positions - 1).clamp(min=0)  # [M, T] position whose logits predict t
    kwargs = dict(inputs_embeds=embeds, attention_mask=inputs.attention_mask, position_ids=inputs.position_ids)
    offset = 0
    if supports_logits_to_keep(type(model)):
        keep = seq_len - int(pred_pos.min())
        kwargs["logits_to_keep"] = keep
        offset = seq_len - keep
    if on_hidden is not None:
        kwargs["output_hidden_states"] = True
    if embeds.requires_grad and torch.is_grad_enabled():
        # A pass that keeps its key/value cache (on_cache) recomputes its layers too: the cache keeps each layer's
        # keys and values the first time the layer runs and passes them through when it runs again in the backward.
        if on_cache is not None:
            kwargs[cache_argument(type(model))] = kept_once_cache(model)
        with layers_recomputed(model):
            out = model(**kwargs, use_cache=on_cache is not None)
    else:
        out = model(**kwargs, use_cache=on_cache is not None)
    if on_hidden is not None and getattr(out, "hidden_states", None) is not None:
        on_hidden(tuple(out.hidden_states))
    if on_cache is not None:
        on_cache(returned_cache(out))
    return gather_target_logprobs(out.logits, pred_pos - offset, inputs.target_ids, inputs.target_mask)


@contextlib.contextmanager
def layer_pauses(model: torch.nn.Module, sizer: SliceSizer | None) -> Iterator[None]:
    """Within it, each decoder layer's forward of this thread first runs `sizer.urgent_checkpoint()`: a user job or
    click that waits gets the model at the next layer boundary of the forward, not after it
    (sequence_salience/slices.py); nothing without a sizer that pauses inside passes. The check is this thread's
    setting of the layers' wrapper (`_layer_forward`), not a hook: another thread's forward runs no pause check and
    `inside.count_hooks` sees nothing (was: a forward pre-hook on every layer, run by every thread's forward)."""
    if sizer is None or sizer.between is None or sizer.urgent is None:
        yield
        return
    with _wrapped(decoder_layers(model), _layer_forward), _this_thread(pause=sizer.urgent_checkpoint):
        yield


@contextlib.contextmanager
def layer_shares(model: torch.nn.Module, sizer: SliceSizer | None, rows: int, ahead: bool = False) -> Iterator[None]:
    """Within it, a forward batch of `rows` rows on this thread tells `sizer` as each decoder layer begins
    (`SliceSizer.reached`): the share of the batch done goes to its `inside`, as a backward's layers do (slices.py
    "Progress inside a backward"), so that a segment job's first batch of forwards has a time left before it ends
    (issue 44); `ahead`: the forward ahead of the units (a matrix job's first: `per_target_gradients`). Only this
    thread's forward (`_layer_forward`'s `pause` setting; inside `layer_pauses` its check runs after the share);
    nothing without a sizer with `inside`."""
    if sizer is None or sizer.inside is None:
        yield
        return
    layers, then = decoder_layers(model), getattr(_LOCAL, "pause", None)

    def reached() -> None:
        sizer.reached()
        if then is not None:
            then()

    sizer.backward_begins(rows, len(layers), ahead)
    try:
        with _wrapped(layers, _layer_forward), _this_thread(pause=reached):
            yield
    finally:
        sizer.backward_begins(0, 0)  # no pass in flight


def _head_forward(forward: Callable, *args, **kwargs):
    """The output embedding's forward, its input first through this thread's `cut` (`logprobs_cut_at_head`)."""
    cut = getattr(_LOCAL, "cut", None)
    return forward(*(cut(args) if cut is not None else args), **kwargs)


def logprobs_cut_at_head(inputs: ModelInputs, embeds: torch.Tensor,
                         on_hidden: Callable[[tuple[torch.Tensor, ...]], None] | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`target_logprobs` with its graph cut at the output embedding's input (the last hidden states it keeps).

    Each position's logits predict one target token, so one backward through the output embedding gives every
    target's gradient at its own position; the graph kept for the per-target backwards then ends at those hidden
    states, and no backward of a chunk of targets carries vocabulary-sized gradients (<[c, M, K, V]>: on the
    default model ~18 MB per row and target of a chunk, most of a matrix chunk's memory above its graph).

    Returns:
      logp: <float32>[M, T] (detached); root: where the per-target backwards start, <float>[M, K, D] the output
      embedding's input (in the graph); root_grads: <float>[M, K, D] d log p(target)/d root at each target's
      position (zero elsewhere). Where the model does not call its output embedding as a module: the graph's
      root is logp itself, in the graph, and root_grads is None.
    """
    head = inputs.model.get_output_embeddings() if hasattr(inputs.model, "get_output_embeddings") else None
    cut: dict[str, torch.Tensor] = {}

    def detach_input(args: tuple) -> tuple:
        if "root" in cut or not args or not isinstance(args[0], torch.Tensor) or not args[0].requires_grad:
            return args
        cut["root"], cut["leaf"] = args[0], args[0].detach().requires_grad_(True)
        return (cut["leaf"], *args[1:])

    # This thread's setting of the head's wrapper, not a hook on the shared model: a forward of another thread
    # meanwhile (another model wrapper on the same weights, a test's second server object) keeps its graph whole.
    heads = (head,) if isinstance(head, torch.nn.Module) else ()
    with _wrapped(heads, _head_forward), _this_thread(cut=detach_input):
        logp = target_logprobs(inputs, embeds, on_hidden)  # [M, T]
    if "root" not in cut:
        return logp.detach(), logp, None
    # Through the output embedding alone (not a pass through the model: torch.autograd.backward, not grad, which
    # tests/pass_counter.py counts as one). Real targets stand at distinct positions; padding's weigh zero.
    torch.autograd.backward(logp.sum(), inputs=[cut["leaf"]])
    return logp.detach(), cut["root"], cut["leaf"].grad


def _root_grad_outputs(root: torch.Tensor, root_grads: torch.Tensor | None, inputs: ModelInputs, c0: int, c: int,
                       weights: torch.Tensor) -> torch.Tensor:
    """The grad_outputs at the graph's root (`logprobs_cut_at_head`) for targets c0 .. c0 + c - 1, one per
    batched backward: <[c, *root.shape]>, weighted per row."""
    ar = torch.arange(c, device=root.device)
    if root_grads is None:  # the root is logp [M, T]
        out = torch.zeros(c, *root.shape, device=root.device, dtype=root.dtype)  # [c, M, T]
        out[ar, :, c0 + ar] = weights[None, :].to(root.dtype)
        return out
    num_rows, keep = root.shape[0], root.shape[1]
    offset = inputs.embeds.shape[1] - keep  # the positions the forward kept are the last `keep`
    pos = (inputs.target_positions[:, c0:c0 + c] - 1).clamp(min=0) - offset  # [M, c]
    vals = root_grads.gather(1, pos[..., None].expand(-1, -1, root.shape[-1]))  # [M, c, D]
    vals = vals * weights.to(root.dtype)[:, None, None] * inputs.target_mask[:, c0:c0 + c, None]  # padding: 0
    out = torch.zeros(c, *root.shape, device=root.device, dtype=root.dtype)  # [c, M, K, D]
    rows = torch.arange(num_rows, device=root.device)[:, None].expand(-1, c)
    out[ar[None, :].expand(num_rows, -1), rows, pos] = vals
    return out


def gather_target_logprobs(logits: torch.Tensor, pred_pos: torch.Tensor, target_ids: torch.Tensor,
                           target_mask: torch.Tensor) -> torch.Tensor:
    """log p(target_t) read from a forward's logits.

    Args:
      logits: <float>[M, K, V] the logits the forward kept.
      pred_pos: <int64>[M, T] index into K of the logits that predict each target token.
      target_ids: <int64>[M, T]; target_mask: <bool>[M, T].
    Returns:
      <float32>[M, T], zero where target_mask is False.
    """
    vocab = logits.shape[-1]
    idx = pred_pos[..., None].expand(-1, -1, vocab)  # [M, T, V]
    selected = logits.gather(1, idx).float()  # [M, T, V]
    logp = selected.log_softmax(-1).gather(-1, target_ids[..., None]).squeeze(-1)  # [M, T]
    return logp * target_mask


BACKWARD_STRATEGIES = ("auto", "vmap", "loop")


# Models whose vmapped backward raised (an op without a batching rule), held weakly: the
# fallback to one backward per target is kept per model, so one model's failure does not turn
# vmap off for every other model in the process.
_VMAP_FAILED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


def resolve_backward(strategy: str, model: torch.nn.Module | None = None) -> str:
    """The backward strategy for `model`: "auto" is vmap, except for a model whose vmapped
    backward has already failed (then "loop", without trying again). The same on every device:
    on 2 CPU cores vmap measured as fast as the loop (6.5 s vs 6.7 s for a 16 x 205 matrix of
    SmolLM2-135M, benchmarks/bench_salience.py) and it batches better on accelerators; "loop"
    needs about a third less memory (ask for it with backward="loop")."""
    if strategy not in BACKWARD_STRATEGIES:
        raise SalienceError(f"Unknown backward strategy {strategy!r}. Fix: use one of {', '.join(BACKWARD_STRATEGIES)}.")
    if strategy == "auto":
        return "loop" if model is not None and model in _VMAP_FAILED else "vmap"
    return strategy


def per_target_gradients(
    inputs: ModelInputs,
    embeds: torch.Tensor,
    chunk_size: int,
    row_weights: torch.Tensor | None = None,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    backward: str = "vmap",
    on_chunk: Callable[[int], None] | None = None,
    sizer: SliceSizer | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient of each target token's log-prob w.r.t. the input embeddings.

    Args:
      inputs: the batch, batch size M.
      embeds: <float>[M, L, D] where to take the gradients.
      chunk_size: target tokens per batched backward.
      row_weights: optional <float>[M] scale of each batch row's objective (IG step weights).
      reduce: optional map applied to each chunk's gradients <float>[c, M, L, D] before
        they are stored (IG sums over steps here, keeping memory at [T, B, L, D]).
      backward: "vmap" or "loop" (resolved, see resolve_backward).
      on_chunk: called with the number of targets finished after each chunk (progress).
      sizer: time slices (sequence_salience/slices.py): each chunk then has as many targets
        as fit the sizer's target time (measured on the previous chunk), at most chunk_size
        (the memory cap), and on_chunk(0) also runs once after the forward. The forward's
        graph is kept across chunks either way, so the gradients are the same; except that when the
        sizer's `release_graph` says so at a pause after a chunk, the graph is freed for the pause and
        the forward runs again after it (the same values: sequence_salience/slices.py, "The graph
        across pauses"). `sizer.holding_graph` says whether the graph is held during each pause.
    Returns:
      logprobs: <float32>[M, T] (detached).
      grads: <float32>[T, M, L, D], or reduce's output shape stacked over T.
    """
    e = embeds.detach().requires_grad_(True)
    with torch.enable_grad():
        start = sizer.clock() if sizer is not None else 0.0
        on_hidden, hooked = None, [0]  # the layer boundaries of each backward (sizer.backward_begins)
        if sizer is not None and sizer.between is not None:  # pauses inside each backward, between layers
            def on_hidden(hidden: tuple[torch.Tensor, ...]) -> None:
                hooked[0] = 0
                for h in hidden[1:]:
                    if h.requires_grad:
                        h.register_hook(sizer.hook)
                        hooked[0] += 1

        def forward() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
            if sizer is not None:
                sizer.holding_graph = True
            # the computation's first forward tells its layers' share as the pass ahead of the units (slices.py)
            first = sizer is not None and sizer.unit_s is None
            with layer_pauses(inputs.model, sizer), \
                    layer_shares(inputs.model, sizer if first else None, e.shape[0], ahead=True):
                return logprobs_cut_at_head(inputs, e, on_hidden)  # [M, T], the graph's root and its gradients

        paused = sizer.paused_s if sizer is not None else 0.0
        logprobs, root, root_grads = forward()
        num_rows, num_targets = logprobs.shape
        weights = torch.ones(num_rows, device=e.device) if row_weights is None else row_weights.to(e.device)
        chunks = []
        if sizer is not None:  # a backward row costs about a forward row (its pauses are no model time)
            sizer.estimate(num_rows, sizer.clock() - start - (sizer.paused_s - paused))
            if on_chunk is not None:
                on_chunk(0)  # the forward was a slice of its own
            sizer.mark()
        c0 = 0
        while c0 < num_targets:
            if root is None:  # freed for another's turn: the same forward again
                _, root, root_grads = forward()
                sizer.forwards_again += 1
                sizer.mark()
            if sizer is None:
                c = min(chunk_size, num_targets - c0)
            else:
                fit = sizer.chunk_units(chunk_size * num_rows, num_rows) // num_rows
                c = max(1, min(chunk_size, num_targets - c0, fit))
                start, paused = sizer.clock(), sizer.paused_s
            grad_out = _root_grad_outputs(root, root_grads, inputs, c0, c, weights)  # [c, *root.shape]
            if sizer is not None:
                sizer.backward_begins(c * num_rows, hooked[0] * (c if backward == "loop" else 1))
            if backward == "loop":
                g = torch.stack([torch.autograd.grad(root, e, grad_outputs=go, retain_graph=True)[0] for go in grad_out])
            else:
                g = _batched_grad(inputs.model, root, e, grad_out)  # [c, M, L, D]
            g = g.float()
            chunks.append(reduce(g) if reduce is not None else g)
            if sizer is not None:
                sizer.record(c * num_rows, sizer.clock() - start - (sizer.paused_s - paused))
            c0 += c
            if c0 >= num_targets:
                root = root_grads = None  # the last chunk: the graph goes before the caller's pause
            if sizer is not None:
                if root is not None and sizer.release_graph is not None and sizer.release_graph():
                    root = root_grads = None  # another's turn: no graph of ours held across it
                sizer.holding_graph = root is not None
            if on_chunk is not None:
                on_chunk(c)
            if sizer is not None:
                sizer.mark()
    return logprobs, torch.cat(chunks, dim=0)


def weighted_gradient(
    inputs: ModelInputs, embeds: torch.Tensor, target_weights: torch.Tensor, row_weights: torch.Tensor | None = None,
    on_layer: Callable[[], None] | None = None, on_cache: Callable[[object], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient of one objective per row, sum_t target_weights[m, t] * log p(target_t): one forward + backward.

    Args:
      embeds: <float>[M, L, D]; target_weights: <float>[M, T]; row_weights: optional <float>[M].
      on_layer: optional; called once the forward is done, then at each layer boundary of the backward (as
        many times as the model has hidden states after the embeddings), e.g. to report progress through a
        long pass; what it raises ends the pass.
      on_cache: as target_logprobs'.
    Returns:
      logprobs <float32>[M, T] (detached) and grads <float32>[M, L, D].
    """
    e = embeds.detach().requires_grad_(True)
    with torch.enable_grad():
        on_hidden = None
        if on_layer is not None:
            def on_hidden(hidden: tuple[torch.Tensor, ...]) -> None:
                for h in hidden[1:]:
                    if h.requires_grad:
                        h.register_hook(lambda grad: on_layer())  # a tensor hook: never changes the gradient
        with _this_thread(one_backward=True):  # the one backward below (KEPT_IN_RECOMPUTATION)
            logp = target_logprobs(inputs, e, on_hidden, on_cache)  # [M, T]
        if on_layer is not None:
            on_layer()
        objective = (logp * target_weights.to(logp.device)).sum(-1)  # [M]
        if row_weights is not None:
            objective = objective * row_weights.to(logp.device)
        (g,) = torch.autograd.grad(objective.sum(), e)
    return logp.detach(), g.float()


def _batched_grad(model: torch.nn.Module, root: torch.Tensor, e: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """d(grad_out[k] . root)/d e for every k, as one vmapped backward (falls back to a loop of
    backwards, from then on for this model)."""
    if model not in _VMAP_FAILED:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                (g,) = torch.autograd.grad(root, e, grad_outputs=grad_out, retain_graph=True, is_grads_batched=True)
            return g
        except RuntimeError as err:  # an op without a batching rule
            _VMAP_FAILED.add(model)
            logger.warning("Batched backward unavailable (%s); using one backward per target token.", err)
    rows = [torch.autograd.grad(root, e, grad_outputs=go, retain_graph=True)[0] for go in grad_out]
    return torch.stack(rows)
