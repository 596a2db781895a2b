"""Interventions on feed-forward value vectors, and what they change.

An intervention is (layer, value index, mode, scope). Modes:

* ``off``: the value's coefficient is set to 0 (as if its column of the output
  projection were zero). LM-Debugger writes 0 into GPT-2's ``c_fc`` output, before
  the GELU; GELU(0) = 0, so that is the same as 0 at the ``c_proj`` input, where it
  is written here for every family.
* ``on`` (LM-Debugger's rule, flask_server/req_res_oop.py): ONE constant per layer,
  ``C = max_j |m_j| * ||v_j|| + ON_OFFSET`` (``ON_OFFSET`` = 0.01), the layer's largest
  sub-update score at the traced position of the un-intervened run (LM-Debugger
  traces only the next token after the prompt, so there it is the last position),
  computed once by `resolve` before any hook is set. Where it is written:

  - GPT-2 (``conv1d``): into dimension `index` of the ``c_fc`` OUTPUT, before the
    activation, exactly as LM-Debugger does; the coefficient is then GELU(C).
  - gated FFNs (Llama, Mistral, Qwen, Gemma: ``down_proj(act(gate(x)) * up(x))``):
    there is no single pre-activation. Writing C into ``gate_proj``'s output would
    give act(C) * up(x), whose size and SIGN depend on up(x), so the value could come
    out negative or near zero: not "on". The documented equivalent chosen here is to
    set the COEFFICIENT itself (the ``down_proj`` input, ``act(gate) * up``) to C,
    which is what LM-Debugger's GELU(C) amounts to for any C past a few units
    (GELU(C) = C * Phi(C)).
* ``on_layer_max``: the previous rule, kept under its own name: the coefficient
  is set just above the largest coefficient of that layer AT THE SAME POSITION
  (``max + ON_MARGIN * |max|``, recomputed at every position), after the activation
  (the output projection's input), for every family.

Scopes: ``all`` (every position: prompt, response and generated tokens, as
LM-Debugger) or ``position`` (only the traced position, the one that predicts
the traced token; in a generation that is the same absolute position P + t - 1).

The hooks are registered inside `apply_interventions` (or each step below),
which removes them on exit, error or not. With no interventions no hook is
registered at all, so the model is untouched. ``on`` and ``position`` need the
traced position: `resolve(lm, at, ivs)` fills in the constant and the position
(every step that takes `at` does it; `intervene` does it once for all steps).

`intervene` runs the comparison the UI shows: the trace, the greedy
generation and the salience of the response, before and under the
interventions. Its steps are also offered one by one, so that a caller can
answer the cheap part first and reuse what it already has for the "before"
side (the server does):

    at = locate(lm, prompt, response, t)
    ivs = resolve(lm, at, ivs)                                 # "on" constants, "position" scope
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
from sequence_salience.methods import grad_x_input
from sequence_salience.model import Generation, GenerationConfig, LanguageModel
from sequence_salience.text import ChatPrompt

MODES = ("off", "on", "on_layer_max")
SCOPES = ("all", "position")
ON_OFFSET = 0.01  # LM-Debugger's "on": the layer's largest score |m|*||v|| + 0.01
ON_MARGIN = 0.01  # "on_layer_max": max + 1% of |max| at each position
STEPS = ("trace", "generate", "salience")  # the stages `intervene` reports to `progress`

Progress = Callable[[str, int, int], None]  # progress(stage, done, total)
Cancel = Callable[[], bool]  # True: stop (ComputationCancelled)
OnToken = Callable[[tuple[int, ...]], None]  # the response ids generated so far


@dataclasses.dataclass(frozen=True)
class Intervention:
    """Value vector `index` of `layer`: mode "off", "on" or "on_layer_max", scope "all" or "position".

    value: the constant "on" writes (filled in by `resolve`); position: the absolute position
    "position" scope touches (filled in by `resolve`). Both None until resolved.
    """

    layer: int
    index: int
    mode: str = "off"
    scope: str = "all"
    value: float | None = None
    position: int | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise SalienceError(f"Intervention mode {self.mode!r}. Fix: use one of {', '.join(MODES)}.")
        if self.scope not in SCOPES:
            raise SalienceError(f"Intervention scope {self.scope!r}. Fix: use 'all' (every position) or 'position' "
                                "(the traced position only).")

    @property
    def resolved(self) -> bool:
        return (self.mode != "on" or self.value is not None) and (self.scope != "position" or self.position is not None)

    @classmethod
    def parse(cls, obj: "Intervention | Mapping | Sequence") -> "Intervention":
        """From an Intervention, {"layer": 3, "index": 17, "mode": "off", "scope": "all"} or (3, 17, "off"[, "all"])."""
        if isinstance(obj, Intervention):
            return obj
        try:
            if isinstance(obj, Mapping):
                layer, index, mode = obj["layer"], obj["index"], obj.get("mode", "off")
                scope = obj.get("scope", "all")
            else:
                seq = list(obj)
                if len(seq) == 2:
                    seq.append("off")
                if len(seq) == 3:
                    seq.append("all")
                layer, index, mode, scope = seq
        except (KeyError, TypeError, ValueError):
            raise SalienceError(
                f"Cannot read intervention {obj!r}. Fix: write {{\"layer\": 3, \"index\": 17, \"mode\": \"off\"}}."
            ) from None
        if isinstance(layer, bool) or isinstance(index, bool) or not all(
                isinstance(v, (int, np.integer)) or (isinstance(v, float) and v.is_integer()) for v in (layer, index)):
            raise SalienceError(f"Intervention {obj!r}: layer and index must be whole numbers.")
        return cls(int(layer), int(index), str(mode), str(scope))


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


def on_constants(lm: LanguageModel, at: "Located", layers: Iterable[int],
                 arch: Architecture | None = None) -> dict[int, float]:
    """LM-Debugger's "on" constant per layer: max_j |m_j| * ||v_j|| + ON_OFFSET at `at.position`
    of the un-intervened run (one plain forward pass, no hooks of ours)."""
    from sequence_salience.inside.trace import capture, value_norms  # trace imports nothing from here

    layers = sorted(set(layers))
    if not layers:
        return {}
    arch = arch or resolve_architecture(lm.model)
    cap = capture(lm, at.ids, at.position, arch)
    norms = value_norms(arch)  # [L, F]
    scores = cap.coefs.float().abs() * norms  # [L, F]
    return {i: float(scores[i].max()) + ON_OFFSET for i in layers}


def resolve(lm: LanguageModel, at: "Located", interventions: Iterable,
            arch: Architecture | None = None) -> tuple[Intervention, ...]:
    """The interventions with "on" constants (`on_constants`) and "position" scopes filled in for `at`.

    Already resolved interventions are kept as they are; at most one plain forward pass.
    """
    arch = arch or resolve_architecture(lm.model)
    ivs = validate(interventions, arch)
    constants = on_constants(lm, at, [iv.layer for iv in ivs if iv.mode == "on" and iv.value is None], arch)
    out = []
    for iv in ivs:
        if iv.mode == "on" and iv.value is None:
            iv = dataclasses.replace(iv, value=constants[iv.layer])
        if iv.scope == "position" and iv.position is None:
            iv = dataclasses.replace(iv, position=at.position)
        out.append(iv)
    return tuple(out)


class _Positions:
    """The absolute positions of the current forward call (<int64>[S]), read by a pre-hook on the model.

    With a KV cache (generation) a call covers only the new positions. Read, in order: the
    `position_ids` the model gets (transformers' generate passes them), `cache_position`, the
    cache's length (`past_key_values` or `cache`) + 0..S-1; with none of them, 0..S-1.
    """

    def __init__(self) -> None:
        self.now: torch.Tensor | None = None

    def hook(self, _module, args, kwargs):
        x = kwargs.get("input_ids", args[0] if args else None)
        if x is None:
            x = kwargs["inputs_embeds"]
        n = x.shape[1]
        position_ids, cache_position = kwargs.get("position_ids"), kwargs.get("cache_position")
        if position_ids is not None:
            self.now = position_ids.reshape(-1, position_ids.shape[-1])[0, -n:].to(x.device)
        elif cache_position is not None:
            self.now = cache_position.reshape(-1)[-n:].to(x.device)
        else:
            past = kwargs.get("past_key_values", kwargs.get("cache"))
            start = int(past.get_seq_length()) if past is not None and hasattr(past, "get_seq_length") else 0
            self.now = torch.arange(start, start + n, device=x.device)
        return None

    def rows(self, iv: Intervention, n: int, device) -> torch.Tensor:
        """<bool>[S]: the positions of this call `iv` touches."""
        if iv.scope == "all":
            return torch.ones(n, dtype=torch.bool, device=device)
        if self.now is None or len(self.now) != n:
            raise SalienceError("The intervention's position is unknown in this forward pass. Fix: run the model "
                                "as a whole (input_ids or inputs_embeds), not a layer on its own.")
        return self.now.to(device) == iv.position


def _coefficient_hook(items: Sequence[Intervention], positions: _Positions):
    """A pre-hook on one output projection: "off", "on_layer_max", and "on" for gated FFNs."""

    def hook(_module, args):
        x = args[0]  # [B, S, F] coefficients
        top = x.max(dim=-1, keepdim=True).values  # [B, S, 1], before any change
        boosted = top + ON_MARGIN * top.abs()  # [B, S, 1]
        x = x.clone()
        for iv in items:
            rows = positions.rows(iv, x.shape[1], x.device)  # [S]
            if iv.mode == "off":
                x[:, rows, iv.index] = 0.0
            elif iv.mode == "on_layer_max":
                x[:, rows, iv.index] = boosted[:, rows, 0]
            else:  # "on", gated: the coefficient itself
                x[:, rows, iv.index] = float(iv.value)
        return (x, *args[1:])

    return hook


def _pre_activation_hook(items: Sequence[Intervention], positions: _Positions):
    """A forward hook on GPT-2's c_fc: LM-Debugger's "on" constant written before the activation."""

    def hook(_module, _args, output):
        out = output.clone()  # [B, S, F] pre-activations
        for iv in items:
            rows = positions.rows(iv, out.shape[1], out.device)
            out[:, rows, iv.index] = float(iv.value)
        return out

    return hook


@contextlib.contextmanager
def apply_interventions(
    lm: LanguageModel, interventions: Iterable, arch: Architecture | None = None, at: "Located | None" = None,
) -> Iterator[tuple[Intervention, ...]]:
    """`with apply_interventions(lm, [Intervention(3, 17, "off")]): ...` — hooks removed on exit, error or not.

    at: the traced token, to `resolve` "on" constants and "position" scopes not resolved yet.
    """
    arch = arch or resolve_architecture(lm.model)
    ivs = validate(interventions, arch)
    if at is not None and not all(iv.resolved for iv in ivs):
        ivs = resolve(lm, at, ivs, arch)
    with hook_scope() as hooks:
        _register(hooks, ivs, arch, lm.model)
        yield ivs


def _register(hooks: HookSet, ivs: Sequence[Intervention], arch: Architecture, model: torch.nn.Module) -> None:
    """One hook per touched module (none without interventions), plus the position reader for "position"."""
    unresolved = [iv for iv in ivs if not iv.resolved]
    if unresolved:
        iv = unresolved[0]
        raise SalienceError(f"Intervention {iv.layer}:{iv.index} ({iv.mode}, scope {iv.scope}) needs the traced "
                            "position. Fix: pass at=locate(...) or call resolve(lm, at, interventions) first.")
    positions = _Positions()
    if any(iv.scope == "position" for iv in ivs):
        hooks.pre(model, positions.hook, with_kwargs=True)
    by_layer: dict[int, list[Intervention]] = {}
    for iv in ivs:
        by_layer.setdefault(iv.layer, []).append(iv)
    conv1d = arch.layout.kind == "conv1d"
    for layer, items in sorted(by_layer.items()):
        before_act = [iv for iv in items if conv1d and iv.mode == "on"]
        at_coef = [iv for iv in items if iv not in before_act]
        if before_act:
            c_fc = getattr(arch.ffns[layer], arch.layout.ffn_in[0])
            hooks.post(c_fc, _pre_activation_hook(before_act, positions))
        if at_coef:
            hooks.pre(arch.ffn_outs[layer], _coefficient_hook(at_coef, positions))


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
    salience_method: str = grad_x_input.NAME
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
      top_salient: (token index, token, value) of the most salient prompt tokens (chat markup and
        whitespace-only tokens left out).
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
    with apply_interventions(lm, interventions, arch, at):
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
    at: Located | None = None,
) -> Generation:
    """The response generated under the interventions; on_token(ids so far) after every token.

    cancel: checked before the first and after every token; True stops the generation with
      ComputationCancelled (the hooks are removed).
    between_tokens: called after every token with the hooks removed (the model is plain while it
      runs), then they are registered again: a server lets waiting requests use the model there.
    at: the traced token, to `resolve` interventions that are not resolved yet.
    """
    arch = arch or resolve_architecture(lm.model)
    ivs = validate(interventions, arch)
    if at is not None and not all(iv.resolved for iv in ivs):
        ivs = resolve(lm, at, ivs, arch)
    _check(cancel, "before generating")
    with hook_scope() as hooks:
        _register(hooks, ivs, arch, lm.model)

        def each(ids: tuple[int, ...]) -> None:
            if on_token is not None:
                on_token(ids)
            _check(cancel, f"after {len(ids)} generated token(s)")
            if between_tokens is not None:
                hooks.close()
                try:
                    between_tokens()
                finally:
                    _register(hooks, ivs, arch, lm.model)

        streamed = on_token is not None or cancel is not None or between_tokens is not None
        return lm.generate(prompt, config, on_token=each if streamed else None)


@dataclasses.dataclass(frozen=True)
class ResponseSalience:
    """The salience of a whole response (see `Side`)."""

    salience: np.ndarray | None  # <float32>[N], None when skipped or the response is empty
    tokens: tuple[str, ...]  # N
    n_prompt_tokens: int
    top_salient: tuple[tuple[int, str, float], ...]


def _listable(tokens: Sequence[str]) -> np.ndarray:
    """bool [P]: tokens worth listing as "most salient": not chat template markup (the aggregation's
    token-granularity rule, as the salience module applies it) and not whitespace only."""
    from sequence_salience import aggregate  # not at import time: keeps this module's imports light

    text = "".join(tokens)
    ends = np.cumsum([len(t) for t in tokens], dtype=np.int64)  # code points, as the offsets
    offsets = np.stack([ends - [len(t) for t in tokens], ends], axis=1) if tokens else np.zeros((0, 2), np.int64)
    markup = aggregate.segment(text, offsets, "token").excluded
    return ~markup & np.array([t.strip() != "" for t in tokens], dtype=bool)


def response_salience(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    generation: Generation,
    method: str = grad_x_input.NAME,
    top_salient: int = 8,
    interventions: Iterable = (),
    arch: Architecture | None = None,
    values: np.ndarray | None = None,
    at: Located | None = None,
) -> ResponseSalience:
    """Salience of log p(whole response) under the interventions: one forward + backward.

    values: <float32>[N] the salience already computed elsewhere (e.g. a server's cache for
      the plain model); then no model pass runs, only the summary.
    at: the traced token, to `resolve` interventions that are not resolved yet.
    """
    if not method or not generation.ids:
        return ResponseSalience(None, (), 0, ())
    if values is None:
        from sequence_salience.salience import compute_span_salience  # not at import time: salience imports methods

        with apply_interventions(lm, interventions, arch, at):
            values = compute_span_salience(lm, prompt, generation, method)  # [N]
    p_ids, _ = sequence_ids(lm, prompt, generation)
    if len(values) != len(p_ids):
        raise SalienceError(f"{len(values)} salience values for {len(p_ids)} tokens. Fix: pass the values of this "
                            "prompt + response.")
    n_prompt = len(p_ids) - len(generation.ids)
    tokens = tuple(lm.tokenizer.decode([i]) for i in p_ids)
    listed = _listable(tokens[:n_prompt])  # [P]
    order = [int(i) for i in np.argsort(-np.abs(values[:n_prompt]), kind="stable") if listed[i]][:top_salient]
    top = tuple((i, tokens[i], float(values[i])) for i in order)
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
    ivs = resolve(lm, at, ivs, arch)  # one plain forward when an "on" needs its constant
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
