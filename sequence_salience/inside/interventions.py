"""Interventions on feed-forward value vectors, and what they change.

An intervention is (layer, value index, mode):

* ``off``: the value's coefficient is set to 0 (as if its column of the output
  projection were zero);
* ``on``: the coefficient is set just above the largest coefficient of that
  layer at the same position (``max + ON_MARGIN * |max|``), as LM-Debugger does
  to make a value dominate its layer.

They apply at every position (prompt and generated tokens) through a forward
pre-hook on each touched layer's output projection, registered inside
`apply_interventions`, which removes them on exit, error or not. With no
interventions no hook is registered at all, so the model is untouched.

`intervene` runs the comparison the UI shows: the trace, the greedy
generation and the salience of the response, before and under the
interventions. Its steps are also offered one by one, so that a caller can
answer the cheap part first and reuse what it already has for the "before"
side (the server does):

    at = locate(lm, prompt, response, t)
    tr = intervened_trace(lm, at, ivs)                         # one forward: p and rank of token t
    gen = intervened_generation(lm, prompt, ivs, on_token=...)  # streamed, token by token
    sal = response_salience(lm, prompt, gen, interventions=ivs) # one forward + backward

Each step registers the hooks for its own duration only; every step removes
them on exit, also when `cancel` stops it (ComputationCancelled).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from sequence_salience.errors import ComputationCancelled, SalienceError
from sequence_salience.inside.architectures import Architecture, resolve_architecture
from sequence_salience.inside.hooks import HookSet, hook_scope
from sequence_salience.inside.trace import Trace, TraceConfig, plain, sequence_ids, trace_ids
from sequence_salience.model import Generation, GenerationConfig, LanguageModel
from sequence_salience.text import ChatPrompt

MODES = ("off", "on")
ON_MARGIN = 0.01  # "just above": max + 1% of |max|
STEPS = ("trace", "generate", "salience")  # the stages `intervene` reports to `progress`

Progress = Callable[[str, int, int], None]  # progress(stage, done, total)
Cancel = Callable[[], bool]  # True: stop (ComputationCancelled)
OnToken = Callable[[tuple[int, ...]], None]  # the response ids generated so far


@dataclasses.dataclass(frozen=True)
class Intervention:
    """Switch value vector `index` of `layer` off (coefficient 0) or on (just above the layer's max)."""

    layer: int
    index: int
    mode: str = "off"

    def __post_init__(self):
        if self.mode not in MODES:
            raise SalienceError(f"Intervention mode {self.mode!r}. Fix: use 'off' or 'on'.")

    @classmethod
    def parse(cls, obj: "Intervention | Mapping | Sequence") -> "Intervention":
        """From an Intervention, {"layer": 3, "index": 17, "mode": "off"} or (3, 17, "off")."""
        if isinstance(obj, Intervention):
            return obj
        try:
            if isinstance(obj, Mapping):
                layer, index, mode = obj["layer"], obj["index"], obj.get("mode", "off")
            else:
                seq = list(obj)
                layer, index, mode = seq + ["off"] if len(seq) == 2 else seq
        except (KeyError, TypeError, ValueError):
            raise SalienceError(
                f"Cannot read intervention {obj!r}. Fix: write {{\"layer\": 3, \"index\": 17, \"mode\": \"off\"}}."
            ) from None
        if isinstance(layer, bool) or isinstance(index, bool) or not all(
                isinstance(v, (int, np.integer)) or (isinstance(v, float) and v.is_integer()) for v in (layer, index)):
            raise SalienceError(f"Intervention {obj!r}: layer and index must be whole numbers.")
        return cls(int(layer), int(index), str(mode))


def validate(interventions: Iterable, arch: Architecture) -> tuple[Intervention, ...]:
    """Parsed, checked against the model's size, duplicates of (layer, index) rejected."""
    out = tuple(Intervention.parse(x) for x in interventions)
    seen: dict[tuple[int, int], str] = {}
    f = arch.ffn_size
    for iv in out:
        if not 0 <= iv.layer < arch.num_layers:
            raise SalienceError(f"Intervention layer {iv.layer} is outside 0..{arch.num_layers - 1}.")
        if not 0 <= iv.index < f:
            raise SalienceError(f"Intervention value index {iv.index} is outside 0..{f - 1} (layer {iv.layer}).")
        key = (iv.layer, iv.index)
        if key in seen:
            raise SalienceError(f"Value {iv.layer}:{iv.index} is listed twice. Fix: keep one mode per value.")
        seen[key] = iv.mode
    return out


def _layer_hook(off: torch.Tensor, on: torch.Tensor):
    """A pre-hook for one output projection: off <[F]> bool, on <[F]> bool."""

    def hook(_module, args):
        x = args[0]  # [B, S, F] coefficients
        keep = (~(off | on)).to(x.dtype)  # [F]
        top = x.max(dim=-1, keepdim=True).values  # [B, S, 1], before any change
        boosted = top + ON_MARGIN * top.abs()  # [B, S, 1]
        x = x * keep + on.to(x.dtype) * boosted
        return (x, *args[1:])

    return hook


@contextlib.contextmanager
def apply_interventions(
    lm: LanguageModel, interventions: Iterable, arch: Architecture | None = None
) -> Iterator[tuple[Intervention, ...]]:
    """`with apply_interventions(lm, [Intervention(3, 17, "off")]): ...` — hooks removed on exit, error or not."""
    arch = arch or resolve_architecture(lm.model)
    ivs = validate(interventions, arch)
    with hook_scope() as hooks:
        _register(hooks, ivs, arch)
        yield ivs


def _register(hooks: HookSet, ivs: Sequence[Intervention], arch: Architecture) -> None:
    """One pre-hook per touched output projection (none without interventions)."""
    by_layer: dict[int, list[Intervention]] = {}
    for iv in ivs:
        by_layer.setdefault(iv.layer, []).append(iv)
    f = arch.ffn_size
    for layer, items in sorted(by_layer.items()):
        device = arch.ffn_outs[layer].weight.device
        off = torch.zeros(f, dtype=torch.bool, device=device)
        on = torch.zeros(f, dtype=torch.bool, device=device)
        for iv in items:
            (off if iv.mode == "off" else on)[iv.index] = True
        hooks.pre(arch.ffn_outs[layer], _layer_hook(off, on))


@dataclasses.dataclass(frozen=True)
class InterventionConfig:
    """What `intervene` computes.

    Attributes:
      trace: how much of each trace to keep.
      generation: the greedy generation run before and under the interventions.
      salience_method: the method for the salience of each whole response ("" = skip).
      top_salient: prompt tokens listed per response, most salient first.
    """

    trace: TraceConfig = TraceConfig()
    generation: GenerationConfig = GenerationConfig(max_new_tokens=32)
    salience_method: str = "grad_x_input"
    top_salient: int = 8


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of the comparison (before, or under the interventions).

    Attributes:
      trace: the per-layer trace of the traced position.
      generation: the greedy response to the prompt.
      salience: <float32>[N] salience of the whole response for every token
        (prompt + response), or None when skipped or the response is empty.
      tokens: the N token strings `salience` refers to.
      n_prompt_tokens: P.
      top_salient: (token index, token, value) of the most salient prompt tokens.
      seconds: time for generation + salience.
    """

    trace: Trace
    generation: Generation
    salience: np.ndarray | None
    tokens: tuple[str, ...]
    n_prompt_tokens: int
    top_salient: tuple[tuple[int, str, float], ...]
    seconds: float


@dataclasses.dataclass(frozen=True)
class InterventionResult:
    interventions: tuple[Intervention, ...]
    before: Side
    after: Side

    def as_dict(self) -> dict:
        """Plain JSON-able dict (salience arrays as lists)."""
        return plain(dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class Located:
    """Where the traced token sits: prompt + target ids, and the position that predicts token t.

    Attributes:
      ids: prompt + target token ids.
      n_prompt_tokens: P.
      t: the traced target token.
      position: P + t - 1 (P - 1 when there is no target: the next token after the prompt).
      target_id: ids[P + t], or None with no target (the model's own top prediction is traced).
    """

    ids: tuple[int, ...]
    n_prompt_tokens: int
    t: int
    position: int
    target_id: int | None

    @property
    def n_targets(self) -> int:
        return len(self.ids) - self.n_prompt_tokens


def locate(lm: LanguageModel, prompt: str | ChatPrompt, target: str | Generation | None = None, t: int = 0) -> Located:
    """Token `t` of `target` after `prompt` (None: the next token after the prompt)."""
    ids, n_prompt = sequence_ids(lm, prompt, target)
    n_targets = len(ids) - n_prompt
    if n_targets == 0:
        return Located(tuple(ids), n_prompt, 0, n_prompt - 1, None)
    if not 0 <= t < n_targets:
        raise SalienceError(f"t={t} is outside the {n_targets} target tokens. Fix: pick 0..{n_targets - 1}.")
    return Located(tuple(ids), n_prompt, t, n_prompt + t - 1, ids[n_prompt + t])


def _check(cancel: Cancel | None, what: str) -> None:
    if cancel is not None and cancel():
        raise ComputationCancelled(f"intervention run cancelled {what}")


def intervened_trace(
    lm: LanguageModel,
    at: Located,
    interventions: Iterable = (),
    config: TraceConfig = TraceConfig(),
    arch: Architecture | None = None,
    target_id: int | None = None,
    index=None,
) -> Trace:
    """The trace of `at` under the interventions: one forward pass, no backward (no interventions: the plain trace).

    target_id: overrides `at.target_id` (e.g. the token the plain model predicts, to follow it under the
      interventions when there is no target); index: as in `trace_ids`.
    """
    arch = arch or resolve_architecture(lm.model)
    tid = at.target_id if target_id is None else target_id
    with apply_interventions(lm, interventions, arch):
        return trace_ids(lm, at.ids, at.position, tid, config, arch, index=index)


def intervened_generation(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    interventions: Iterable = (),
    config: GenerationConfig = GenerationConfig(max_new_tokens=32),
    arch: Architecture | None = None,
    on_token: OnToken | None = None,
    cancel: Cancel | None = None,
    between_tokens: Callable[[], None] | None = None,
) -> Generation:
    """The response generated under the interventions; on_token(ids so far) after every token.

    cancel: checked before the first and after every token; True stops the generation with
      ComputationCancelled (the hooks are removed).
    between_tokens: called after every token with the hooks removed (the model is plain while it
      runs), then they are registered again: a server lets waiting requests use the model there.
    """
    arch = arch or resolve_architecture(lm.model)
    ivs = validate(interventions, arch)
    _check(cancel, "before generating")
    with hook_scope() as hooks:
        _register(hooks, ivs, arch)

        def each(ids: tuple[int, ...]) -> None:
            if on_token is not None:
                on_token(ids)
            _check(cancel, f"after {len(ids)} generated token(s)")
            if between_tokens is not None:
                hooks.close()
                try:
                    between_tokens()
                finally:
                    _register(hooks, ivs, arch)

        streamed = on_token is not None or cancel is not None or between_tokens is not None
        return lm.generate(prompt, config, on_token=each if streamed else None)


@dataclasses.dataclass(frozen=True)
class ResponseSalience:
    """The salience of a whole response (see `Side`)."""

    salience: np.ndarray | None  # <float32>[N], None when skipped or the response is empty
    tokens: tuple[str, ...]  # N
    n_prompt_tokens: int
    top_salient: tuple[tuple[int, str, float], ...]


def response_salience(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    generation: Generation,
    method: str = "grad_x_input",
    top_salient: int = 8,
    interventions: Iterable = (),
    arch: Architecture | None = None,
    values: np.ndarray | None = None,
) -> ResponseSalience:
    """Salience of log p(whole response) under the interventions: one forward + backward.

    values: <float32>[N] the salience already computed elsewhere (e.g. a server's cache for
      the plain model); then no model pass runs, only the summary.
    """
    if not method or not generation.ids:
        return ResponseSalience(None, (), 0, ())
    if values is None:
        from sequence_salience.salience import compute_span_salience  # not at import time: salience imports methods

        with apply_interventions(lm, interventions, arch):
            values = compute_span_salience(lm, prompt, generation, method)  # [N]
    p_ids, _ = sequence_ids(lm, prompt, generation)
    if len(values) != len(p_ids):
        raise SalienceError(f"{len(values)} salience values for {len(p_ids)} tokens. Fix: pass the values of this "
                            "prompt + response.")
    n_prompt = len(p_ids) - len(generation.ids)
    tokens = tuple(lm.tokenizer.decode([i]) for i in p_ids)
    order = np.argsort(-np.abs(values[:n_prompt]))[:top_salient]
    top = tuple((int(i), tokens[i], float(values[i])) for i in order)
    return ResponseSalience(np.asarray(values), tokens, n_prompt, top)


def intervene(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    interventions: Iterable,
    target: str | Generation | None = None,
    t: int = 0,
    config: InterventionConfig = InterventionConfig(),
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    on_token: OnToken | None = None,
) -> InterventionResult:
    """Before vs. under the interventions: the trace of target token `t`, the greedy response, its salience.

    In steps (`STEPS`): both traces, then both generations, then both saliences, so the
    probabilities come first.

    Args:
      lm: a loaded model.
      prompt: raw text or a ChatPrompt.
      interventions: Intervention objects, dicts or (layer, index, mode) tuples.
      target: the response whose token `t` is traced (the same tokens on both
        sides, so the probabilities compare); None traces the next token after the prompt.
      t: which target token to trace.
      config: what to compute.
      progress: progress(stage, done, total) at the start and end of each step and after each
        generated token (generate: done tokens of at most max_new_tokens per side).
      cancel: checked between steps and after every generated token; True raises ComputationCancelled.
      on_token: on_token(ids so far) for the generation under the interventions.
    """
    arch = resolve_architecture(lm.model)
    ivs = validate(interventions, arch)
    at = locate(lm, prompt, target, t)
    report = progress or (lambda stage, done, total: None)
    report("trace", 0, 2)
    _check(cancel, "before the traces")
    before_tr = intervened_trace(lm, at, (), config.trace, arch)
    report("trace", 1, 2)
    _check(cancel, "between the traces")
    after_tr = intervened_trace(lm, at, ivs, config.trace, arch, target_id=before_tr.target_id)
    report("trace", 2, 2)  # same token under the interventions, also when there is no target

    n = config.generation.max_new_tokens
    sides = (((), before_tr, None), (ivs, after_tr, on_token))
    gens, starts = [], []
    for k, (side_ivs, _, stream) in enumerate(sides):
        report("generate", k * n, 2 * n)
        starts.append(time.perf_counter())

        def each(ids: tuple[int, ...], k=k, stream=stream) -> None:
            if stream is not None:
                stream(ids)
            report("generate", k * n + len(ids), 2 * n)

        gens.append(intervened_generation(lm, prompt, side_ivs, config.generation, arch, on_token=each, cancel=cancel))
        starts[k] = time.perf_counter() - starts[k]
    report("generate", 2 * n, 2 * n)
    out = []
    for k, (side_ivs, tr, _) in enumerate(sides):
        report("salience", k, 2)
        _check(cancel, "before the salience")
        start = time.perf_counter()
        sal = response_salience(lm, prompt, gens[k], config.salience_method, config.top_salient, side_ivs, arch)
        out.append(Side(tr, gens[k], sal.salience, sal.tokens, sal.n_prompt_tokens, sal.top_salient,
                        starts[k] + time.perf_counter() - start))
    report("salience", 2, 2)
    return InterventionResult(ivs, out[0], out[1])
