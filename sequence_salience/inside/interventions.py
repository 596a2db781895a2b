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
interventions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from sequence_salience.errors import SalienceError
from sequence_salience.inside.architectures import Architecture, resolve_architecture
from sequence_salience.inside.hooks import hook_scope
from sequence_salience.inside.trace import Trace, TraceConfig, plain, sequence_ids, trace_ids
from sequence_salience.model import Generation, GenerationConfig, LanguageModel
from sequence_salience.text import ChatPrompt

MODES = ("off", "on")
ON_MARGIN = 0.01  # "just above": max + 1% of |max|


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
        yield ivs


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


def _side(lm, arch, prompt, ids, position, target_id, config: InterventionConfig) -> Side:
    tr = trace_ids(lm, ids, position, target_id, config.trace, arch)
    start = time.perf_counter()
    gen = lm.generate(prompt, config.generation)
    salience, tokens, n_prompt, top = None, (), 0, ()
    if config.salience_method and gen.ids:
        from sequence_salience.salience import compute_span_salience  # not at import time: salience imports methods

        salience = compute_span_salience(lm, prompt, gen, config.salience_method)  # [N]
        p_ids, _ = sequence_ids(lm, prompt, gen)
        n_prompt = len(p_ids) - len(gen.ids)
        tokens = tuple(lm.tokenizer.decode([i]) for i in p_ids)
        order = np.argsort(-np.abs(salience[:n_prompt]))[: config.top_salient]
        top = tuple((int(i), tokens[i], float(salience[i])) for i in order)
    return Side(tr, gen, salience, tokens, n_prompt, top, time.perf_counter() - start)


def intervene(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    interventions: Iterable,
    target: str | Generation | None = None,
    t: int = 0,
    config: InterventionConfig = InterventionConfig(),
) -> InterventionResult:
    """Before vs. under the interventions: the trace of target token `t`, the greedy response, its salience.

    Args:
      lm: a loaded model.
      prompt: raw text or a ChatPrompt.
      interventions: Intervention objects, dicts or (layer, index, mode) tuples.
      target: the response whose token `t` is traced (the same tokens on both
        sides, so the probabilities compare); None traces the next token after the prompt.
      t: which target token to trace.
      config: what to compute.
    """
    arch = resolve_architecture(lm.model)
    ivs = validate(interventions, arch)
    ids, n_prompt = sequence_ids(lm, prompt, target)
    n_targets = len(ids) - n_prompt
    if n_targets == 0:
        position, target_id = n_prompt - 1, None
    else:
        if not 0 <= t < n_targets:
            raise SalienceError(f"t={t} is outside the {n_targets} target tokens. Fix: pick 0..{n_targets - 1}.")
        position, target_id = n_prompt + t - 1, ids[n_prompt + t]
    before = _side(lm, arch, prompt, ids, position, target_id, config)
    if target_id is None:
        target_id = before.trace.target_id  # follow the same token under the interventions
    with apply_interventions(lm, ivs, arch):
        after = _side(lm, arch, prompt, ids, position, target_id, config)
    return InterventionResult(ivs, before, after)
