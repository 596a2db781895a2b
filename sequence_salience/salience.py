"""Input salience for every token of a target text, for every method, in one call.

    prompt (+ chat template) -> tokens with offsets -> target tokens appended ->
    one forward pass -> batched backward over all target tokens -> [T, N] per method.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch

from sequence_salience.errors import ComputationCancelled, SalienceError
from sequence_salience.methods import DEFAULT_METHODS, get_method
from sequence_salience.methods.base import MethodContext, ModelInputs, SalienceConfig, SharedWork
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.result import SalienceResult, Span, UneditedForward
from sequence_salience.slices import SliceSizer, make_sizer
from sequence_salience.text import ChatPrompt, TokenizedText
from sequence_salience.threads import PassSizes, ThreadChooser

# progress(method, done, total): called as each method advances; `total` counts target
# tokens (times steps for a method whose record says progress_counts, e.g. integrated gradients).
Progress = Callable[[str, int, int], None]
# cancel(): True to stop; checked before each method, after each chunk of targets/steps and at each pause inside a pass.
Cancel = Callable[[], bool]


class _MethodProgress:
    """A method's progress: `progress(method, 0, total)` as it starts (its units are known before the first ends:
    a server's job estimates them from a borrowed rate until one is measured, lit_app/model/time_left.py; was: a
    job said nothing of the method's units until its first chunk ended, issue 43), then after each chunk."""

    def __init__(self, callback: Progress | None, method: str, total: int, cancel: Cancel | None = None):
        self.callback, self.method, self.total, self.done = callback, method, total, 0
        self.cancel = cancel
        self.check()
        if callback is not None:
            callback(method, 0, total)

    def check(self) -> None:
        if self.cancel is not None and self.cancel():
            raise ComputationCancelled(f"{self.method} cancelled after {self.done}/{self.total}")

    def __call__(self, units: int) -> None:
        self.done = min(self.total, self.done + units)
        if self.callback is not None:
            self.callback(self.method, self.done, self.total)
        self.check()

    def finish(self) -> None:
        if self.done < self.total:
            self(self.total - self.done)


@dataclasses.dataclass(frozen=True)
class _Pair:
    prompt: TokenizedText
    target_ids: tuple[int, ...]
    target_offsets: tuple[tuple[int, int], ...]
    target_text: str
    role_spans: tuple[tuple[int, int, str], ...]


def prepare_pair(lm: LanguageModel, prompt: str | ChatPrompt, target: str | Generation) -> _Pair:
    """Tokenizes (prompt, target) as every computation here does (a Generation's ids are used as is); checks
    that neither is empty and that they fit the context."""
    prompt_text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
    if not prompt_text.strip():
        raise SalienceError("The prompt is empty. Fix: type a prompt to explain.")
    encoded = lm.encode_prompt(prompt)
    if isinstance(target, Generation):
        target_text, target_ids, target_offsets = target.text, target.ids, target.offsets
    else:
        target_text = target
        tok = lm.tokenize(target, add_special_tokens=False)
        target_ids, target_offsets = tok.ids, tok.offsets
    if not target_ids:
        raise SalienceError("The target is empty. Fix: generate a response first, or type the text to explain.")
    total = len(encoded.ids) + len(target_ids)
    if total > lm.max_length:
        raise SalienceError(
            f"prompt + target is {total:,} tokens ({len(encoded.ids):,} + {len(target_ids):,}); "
            f"this model's context is {lm.max_length:,}. Fix: shorten the prompt or the target."
        )
    roles = prompt.role_spans if isinstance(prompt, ChatPrompt) else ((0, len(prompt_text), "user"),)
    return _Pair(encoded, tuple(target_ids), tuple(target_offsets), target_text, tuple(roles))


def build_inputs(
    lm: LanguageModel, sequences: Sequence[tuple[Sequence[int], Sequence[int]]], padding_side: str = "right"
) -> ModelInputs:
    """Pads (prompt_ids, target_ids) pairs into one batch.

    Positions count real tokens only, so left and right padding give the same results.
    """
    if padding_side not in ("left", "right"):
        raise SalienceError(f"padding_side={padding_side!r}. Fix: use 'left' or 'right'.")
    device = lm.device
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer is not None else None
    if pad_id is None and lm.tokenizer is not None:
        pad_id = lm.tokenizer.eos_token_id
    seq_len = max(len(p) + len(t) for p, t in sequences)
    num_t = max(len(t) for _, t in sequences)
    batch = len(sequences)
    ids = torch.full((batch, seq_len), pad_id or 0, dtype=torch.long)
    mask = torch.zeros(batch, seq_len, dtype=torch.long)
    target_ids = torch.zeros(batch, num_t, dtype=torch.long)
    target_pos = torch.zeros(batch, num_t, dtype=torch.long)
    target_mask = torch.zeros(batch, num_t, dtype=torch.bool)
    for b, (p, t) in enumerate(sequences):
        n = len(p) + len(t)
        start = seq_len - n if padding_side == "left" else 0
        ids[b, start:start + n] = torch.tensor(list(p) + list(t))
        mask[b, start:start + n] = 1
        target_ids[b, : len(t)] = torch.tensor(list(t))
        target_pos[b, : len(t)] = start + len(p) + torch.arange(len(t))
        target_pos[b, len(t):] = start + len(p) + len(t) - 1  # padded targets point at a real token
        target_mask[b, : len(t)] = True
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    embedding = lm.model.get_input_embeddings()
    with torch.no_grad():
        embeds = embedding(ids.to(device))  # [B, L, D]
    return ModelInputs(
        model=lm.model,
        embeds=embeds,
        attention_mask=mask.to(device),
        position_ids=position_ids.to(device),
        target_ids=target_ids.to(device),
        target_positions=target_pos.to(device),
        target_mask=target_mask.to(device),
        embedding_matrix=embedding.weight,
        pad_id=pad_id,
    )


def _validate_methods(methods: Sequence[str]) -> tuple[str, ...]:
    if isinstance(methods, str):
        methods = (methods,)
    if not methods:
        raise SalienceError(f"No salience methods requested. Fix: pass e.g. methods={DEFAULT_METHODS!r}.")
    for name in methods:
        get_method(name)  # raises with the list of known methods
    return tuple(methods)


def _checked(between: Callable[[], None] | None, cancel: Cancel | None) -> Callable[[], None] | None:
    """`between` that also checks `cancel` before and after it runs: a pause inside a backward pass is where a
    cancelled computation stops (ComputationCancelled from the tensor hook ends the pass), instead of after the
    rest of its batched backward (minutes for four targets over a 4,000-token prompt on a loaded machine)."""
    if between is None or cancel is None:
        return between

    def checked() -> None:
        if cancel():
            raise ComputationCancelled("cancelled inside a backward pass")
        between()
        if cancel():
            raise ComputationCancelled("cancelled inside a backward pass")

    return checked


def compute_salience_batch(
    lm: LanguageModel,
    pairs: Sequence[tuple[str | ChatPrompt, str | Generation]],
    methods: Sequence[str] = DEFAULT_METHODS,
    config: SalienceConfig = SalienceConfig(),
    padding_side: str = "right",
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    slice_s: float | SliceSizer | None = None,
    between_slices: Callable[[], None] | None = None,
) -> list[SalienceResult]:
    """Salience for several (prompt, target) pairs in one padded batch (see compute_salience)."""
    methods = _validate_methods(methods)
    prepared = [prepare_pair(lm, p, t) for p, t in pairs]
    inputs = build_inputs(lm, [(x.prompt.ids, x.target_ids) for x in prepared], padding_side)
    sizer = make_sizer(slice_s, _checked(between_slices, cancel))
    if sizer is not None:
        sizer.start()
    work = SharedWork()  # one per call: grad_x_input reuses grad_norm's backward
    outputs = {}
    num_t = inputs.target_ids.shape[1]
    for name in methods:
        method = get_method(name)
        tracker = None
        if progress is not None or cancel is not None:
            units = method.progress_total(num_t, config)
            tracker = _MethodProgress(progress, name, units, cancel)
        # a backward's rows per progress unit (SliceSizer.inside): SmoothGrad's samples, else 1
        rows = 1 if method.progress_counts else method.span_units(config)
        with sizer.counting(rows) if sizer is not None else contextlib.nullcontext():
            outputs[name] = method.compute(inputs, config, MethodContext(tracker, sizer, work))
        if tracker is not None:
            tracker.finish()  # e.g. grad_x_input reusing grad_norm's gradients
    logp = _logprobs(inputs, work)  # [B, T]
    return [_unpad(lm, pair, b, inputs, outputs, logp, config) for b, pair in enumerate(prepared)]


def compute_salience(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    methods: Sequence[str] = DEFAULT_METHODS,
    config: SalienceConfig = SalienceConfig(),
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    slice_s: float | SliceSizer | None = None,
    between_slices: Callable[[], None] | None = None,
) -> SalienceResult:
    """Salience of every prompt (and earlier target) token for every target token.

    Args:
      lm: a loaded model (load_model).
      prompt: raw text (the tokenizer adds BOS) or a ChatPrompt (lm.format_prompt).
      target: the text to explain (tokenized after the prompt), or a Generation (its ids are used as is).
      methods: names from list_methods().
      config: method settings.
      progress: optional progress(method, done, total) callback (the work can take seconds
        to minutes on a CPU); `done` reaches `total` for every method. It runs between
        chunks of target tokens (or IG steps), so it may also wait there, e.g. to let other
        work use the model.
      cancel: optional check, called before each method and after each chunk (and, with
        between_slices, at each pause inside a pass, before and after between_slices); when it
        returns True the computation stops there and raises ComputationCancelled.
      slice_s: None (default): chunks of `config.target_chunk_size` targets (and
        `ig_step_chunk_size` steps or samples), capped by `chunk_token_budget`. A number of
        seconds (or a `slices.SliceSizer`): time slices instead: the forward is one slice and
        each later one a batched backward over as many targets (and, for IG and SmoothGrad,
        steps or samples per forward) as take about `slice_s` seconds, sized from the measured
        cost of the previous slice and still capped by `chunk_token_budget`; `progress` and
        `cancel` run after every slice. The results are the same either way (only how the
        same gradients are batched changes; see sequence_salience/slices.py for why the
        forward is shared across slices).
      between_slices: optional, with slice_s: also called inside a backward pass, at a layer
        boundary, once slice_s of model time has passed since the last slice ended, so a slice
        stays bounded when one target's backward alone is longer. The caller may let other work
        use the model there (not this computation's tensors); the backward continues after it
        returns. Called only on the calling thread (a CPU backward runs there).
    """
    return compute_salience_batch(lm, [(prompt, target)], methods, config, progress=progress, cancel=cancel,
                                  slice_s=slice_s, between_slices=between_slices)[0]


def _span_inputs(lm: LanguageModel, prompt: str | ChatPrompt, target: str | Generation, t0: int,
                 t1: int | None) -> tuple[_Pair, ModelInputs, torch.Tensor, int]:
    """Tokenized pair, model inputs, target weights <float>[1, T] (1 on [t0, t1)) and t1 for a span."""
    pair = prepare_pair(lm, prompt, target)
    num_t = len(pair.target_ids)
    t1 = num_t if t1 is None else t1
    if not 0 <= t0 < t1 <= num_t:
        raise SalienceError(f"Target span {t0}:{t1} is outside 0:{num_t}. Fix: pick target tokens in range.")
    inputs = build_inputs(lm, [(pair.prompt.ids, pair.target_ids)])
    weights = torch.zeros(1, num_t, device=lm.device)
    weights[0, t0:t1] = 1.0
    return pair, inputs, weights, t1


def compute_span_salience(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    method: str,
    t0: int = 0,
    t1: int | None = None,
    config: SalienceConfig = SalienceConfig(),
) -> np.ndarray:
    """Salience for log p(target[t0:t1]) directly: one forward + backward (IG: one batch of steps).

    Returns: <float32>[N].
    """
    _, inputs, weights, _ = _span_inputs(lm, prompt, target, t0, t1)
    return get_method(method).compute_span(inputs, weights, config)[0]


def compute_span_result(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    methods: Sequence[str] = DEFAULT_METHODS,
    t0: int = 0,
    t1: int | None = None,
    config: SalienceConfig = SalienceConfig(),
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    threads: ThreadChooser | PassSizes | None = None,
    record: Callable[[LanguageModel, int, int, tuple[int, int]], object] | None = None,
) -> SalienceResult:
    """A partial SalienceResult holding only the salience of log p(target[t0:t1]).

    The fast path for a first highlight: methods that read the gradient at the input
    (grad_norm, grad_x_input) share ONE forward + backward; integrated gradients adds one
    batch of steps and reports the span's completeness error. `result.matrices` is empty;
    `result.span_salience(method, t0, t1)` answers from `result.spans`, and
    `result.target_logprobs` holds every target token's log-prob (from the same forward).
    Merge it with a full result later with `merged`. `threads`: the torch intra-op thread count of the one
    gradient pass, chosen and measured by it (sequence_salience/threads.py: a `ThreadChooser`, or `PassSizes` for
    passes of every size; None: the calling thread's count). `record`: the gradient pass also keeps the unedited
    prompt's keys and values and runs inside the recorder that `record(lm, n_prompt_tokens, n_tokens, span)` returns
    (ablation.span_recorder: the span rows' attention; when it returns None, nothing is recorded or kept) (`result.unedited`), so that a segment method of
    this span (attention_verified, the first map) runs no unedited forward of its own.
    """
    methods = _validate_methods(methods)
    pair, inputs, weights, t1 = _span_inputs(lm, prompt, target, t0, t1)
    from sequence_salience.methods.gradients import target_logprobs, weighted_gradient

    values: dict[str, np.ndarray] = {}
    ig_errors: dict[Span, float] = {}
    shared = [m for m in methods if get_method(m).from_gradient is not None]
    logp = None
    unedited = None  # what the recorded pass leaves for a segment method (record)
    if shared:
        # Units of the one pass: its forward counts as many as its layers (about a third of the pass), each
        # layer of the backward two, so that a long prompt's first highlight reports progress (and can stop)
        # inside the pass; the tracker checks `cancel` at each.
        layers = int(getattr(lm.model.config, "num_hidden_layers", 0) or 0)
        tracker = _MethodProgress(progress, "+".join(shared), 3 * layers if layers else 1, cancel)
        steps = iter([layers] + [2] * layers) if layers else iter(())
        kept: list = []  # the pass's key/value cache (record)
        recorder = (record(lm, len(pair.prompt.ids), int(inputs.embeds.shape[1]), (t0, t1))
                    if record is not None else None)
        with threads.batch(int(inputs.embeds.shape[1])) if threads is not None else contextlib.nullcontext():
            with recorder if recorder is not None else contextlib.nullcontext():
                logp, g = weighted_gradient(inputs, inputs.embeds, weights,  # [1, T], [1, L, D]
                                            on_layer=(lambda: tracker(next(steps, 0))) if layers else None,
                                            on_cache=kept.append if recorder is not None else None)
        unedited = _unedited(kept, recorder, (t0, t1))
        for name in shared:
            values[name] = get_method(name).from_gradient(g, inputs.embeds)[0].cpu().numpy().astype(np.float32)
        tracker.finish()
    for name in methods:
        if name in values:
            continue
        method = get_method(name)
        # Units compute_span reports: one per step or sample (IG, SmoothGrad), else one pass.
        tracker = _MethodProgress(progress, name, method.span_units(config), cancel)
        out = method.compute_span(inputs, weights, config, progress=tracker)  # [1, L]
        values[name] = np.asarray(out[0], dtype=np.float32)
        tracker.finish()
        if method.span_error is not None:  # IG's completeness error of the span
            ig_errors[(t0, t1)] = float(method.span_error(inputs, weights, config, out)[0])
    if logp is None:
        with torch.no_grad():
            logp = target_logprobs(inputs, inputs.embeds)
    result = _unpad(lm, pair, 0, inputs, {}, logp, config)
    return dataclasses.replace(result, spans={(t0, t1): values}, span_ig_errors=ig_errors,
                               unedited=unedited)


def _unedited(kept: list, recorder, span: tuple[int, int]):
    """The UneditedForward of a recorded pass: its plain key/value cache's layers (detached) and its recorder (None
    where it did not record every layer); None without a plain cache (`cache_layers`)."""
    from sequence_salience.methods.gradients import cache_layers

    layers = cache_layers(kept[0]) if kept else None
    if layers is None:
        return None
    return UneditedForward(span=span, layers=[(k.detach(), v.detach()) for k, v in layers],
                           recorder=recorder if recorder is not None and recorder.complete else None)


def tokenized_result(lm: LanguageModel, prompt: str | ChatPrompt, target: str | Generation,
                     target_logprobs: np.ndarray | None = None, config: SalienceConfig = SalienceConfig()
                     ) -> SalienceResult:
    """A SalienceResult with tokens, offsets and roles but no salience (for the segment methods,
    whose values live on segments): no model pass when `target_logprobs` <float32>[T] is given
    (else one forward computes them)."""
    if target_logprobs is not None:
        return dataclasses.replace(pair_tokens(lm, prompt, target, config),
                                   target_logprobs=np.asarray(target_logprobs, dtype=np.float32))
    pair = prepare_pair(lm, prompt, target)
    inputs = build_inputs(lm, [(pair.prompt.ids, pair.target_ids)])
    from sequence_salience.methods.gradients import target_logprobs as forward_logprobs

    with torch.no_grad():
        logp = forward_logprobs(inputs, inputs.embeds)  # [1, T]
    return _unpad(lm, pair, 0, inputs, {}, logp, config)


def pair_tokens(lm: LanguageModel, prompt: str | ChatPrompt, target: str | Generation,
                config: SalienceConfig = SalienceConfig()) -> SalienceResult:
    """The pair's tokens, offsets, roles and special marks as a SalienceResult, from the tokenizer alone: no model
    pass, no tensor; no salience, and its `target_logprobs` are NaN (not scored). What the segments of a prompt
    need (scoring.prompt_segments): a user's pattern is matched before anything waits for or runs the model."""
    pair = prepare_pair(lm, prompt, target)
    return _pair_result(lm, pair, np.full(len(pair.target_ids), np.nan, dtype=np.float32), {}, {}, config)


def _logprobs(inputs: ModelInputs, work: SharedWork) -> torch.Tensor:
    if work.target_gradients is not None:
        return work.target_gradients[0]
    from sequence_salience.methods.gradients import target_logprobs

    with torch.no_grad():
        return target_logprobs(inputs, inputs.embeds)


def _unpad(lm, pair: _Pair, b: int, inputs: ModelInputs, outputs, logp, config) -> SalienceResult:
    num_t = len(pair.target_ids)
    real = inputs.attention_mask[b].bool().cpu().numpy()
    cols = np.flatnonzero(real)  # positions of this example's tokens in the padded batch
    matrices = {name: out.matrix[b, :num_t][:, cols].astype(np.float32) for name, out in outputs.items()}
    extras = {extra.name: extra.unpad(out.extras[extra.output_key], b, cols, num_t)
              for name, out in outputs.items() for extra in get_method(name).result_extras
              if extra.output_key in out.extras}  # e.g. grad_norm's Gram tensor, absent when too large
    return _pair_result(lm, pair, logp[b, :num_t].float().cpu().numpy(), matrices, extras, config)


def _pair_result(lm, pair: _Pair, logp: np.ndarray, matrices, extras, config) -> SalienceResult:
    """The SalienceResult of `pair` with the target's log-probs `logp` <float32>[T] and these matrices."""
    prompt_end = len(pair.prompt.text)
    offsets = list(pair.prompt.offsets) + [(s + prompt_end, e + prompt_end) for s, e in pair.target_offsets]
    ids = list(pair.prompt.ids) + list(pair.target_ids)
    text = pair.prompt.text + pair.target_text
    special_ids = set(lm.tokenizer.all_special_ids)
    return SalienceResult(
        text=text,
        prompt_end=prompt_end,
        ids=np.asarray(ids, dtype=np.int64),
        tokens=tuple(_token_strings(text, offsets, ids, lm)),
        offsets=np.asarray(offsets, dtype=np.int64).reshape(-1, 2),
        special=np.asarray(list(pair.prompt.special) + [i in special_ids for i in pair.target_ids]),
        n_prompt_tokens=len(pair.prompt.ids),
        target_logprobs=logp,
        matrices=matrices,
        extras=extras,
        role_spans=pair.role_spans,
        config=config,
    )


def _token_strings(text: str, offsets, ids, lm: LanguageModel) -> list[str]:
    """Each token's own text; tokens with empty spans (BOS, partial bytes) use the tokenizer's piece."""
    out = []
    for (s, e), i in zip(offsets, ids):
        out.append(text[s:e] if e > s else lm.tokenizer.convert_ids_to_tokens(int(i)))
    return out
