"""Contrastive salience: why the target rather than the foil? (Yin & Neubig 2022, https://arxiv.org/abs/2202.10419)

For a selected span (t0, t1) of the target (default: the whole target), the objective is

    log p(target[t0:t1] | prompt + target[:t0]) - log p(foil | prompt + target[:t0]),

i.e. the selected part against the foil AT THE SAME POSITION (after the same answer prefix);
the whole answer is contrasted only when the whole answer is selected. Target span and foil
may differ in length. The context shared by both continuations is the prompt's P tokens and
the t0 answer tokens before the span, so the salience is defined over those P + t0 tokens.

* Linear methods (gradient x input, integrated gradients, SmoothGrad, ...): the salience of a
  difference is the difference of the two spans' saliences (compute_span_salience of each).
* A non-linear gradient-at-the-input method (the gradient norm) maps the gradient of the
  difference, e.g. ||g_target,i - g_foil,i||, computed directly with one forward + backward over
  a batch of the two continuations (weights +1 on the target's tokens, -1 on the foil's).
Which method is which comes from its registry record (`linear`, `from_gradient`).

Progress counts units of work (`contrastive_units`): for each of the two continuations, one
pass for the linear gradient-at-the-input methods plus one per step or sample of a method with
a count (IG steps, SmoothGrad samples; other linear methods: one pass each), as
compute_span_result counts them; plus one for the backward of the difference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from sequence_salience import scoring
from sequence_salience.errors import SalienceError
from sequence_salience.explain.faithfulness import distinct_methods
from sequence_salience.methods import DEFAULT_METHODS, get_method, list_methods
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.methods.gradients import weighted_gradient
from sequence_salience.model import Generation, LanguageModel, decode_with_offsets
from sequence_salience.salience import build_inputs, compute_span_result
from sequence_salience.scoring import Cancel, Progress
from sequence_salience.text import ChatPrompt


@dataclasses.dataclass(frozen=True)
class ContrastiveResult:
    """Salience of log p(target span) - log p(foil) for every context token (prompt + answer before the span).

    Attributes:
      text: the context text (prompt, then the answer up to the span); offsets <int64>[C, 2] and
        tokens: its C = P + t0 tokens; special <bool>[C].
      prompt_end: where the prompt ends in `text`; n_prompt_tokens: P.
      role_spans: the prompt's role spans (for role granularity).
      span: (t0, t1) the contrasted target tokens.
      target_text: the span's text; foil_text: the foil's.
      target_logprob, foil_logprob: summed log-probs of the span / the foil after the same context.
      values: method -> <float32>[C].
    """

    text: str
    tokens: tuple[str, ...]
    offsets: np.ndarray
    special: np.ndarray
    role_spans: tuple[tuple[int, int, str], ...]
    target_text: str
    foil_text: str
    target_logprob: float
    foil_logprob: float
    values: Mapping[str, np.ndarray]
    prompt_end: int = 0
    n_prompt_tokens: int = 0
    span: tuple[int, int] = (0, 0)

    @property
    def logprob_difference(self) -> float:
        return self.target_logprob - self.foil_logprob


def _of_difference(method: str) -> bool:
    """Whether contrastive salience maps the gradient of the difference for `method` (not linear,
    but a gradient-at-the-input method: the gradient norm)."""
    m = get_method(method)
    return not m.linear and m.from_gradient is not None


def _gradient_of_difference(lm: LanguageModel, prompt_ids, prefix, span_ids, foil_ids, methods: Sequence[str]
                            ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({method: from_gradient(d/dx [log p(span) - log p(foil)]) <float32>[P + t0]}, log-probs <float64>[2]),
    both continuations after prefix; one forward + backward for all `methods`."""
    C = len(prompt_ids) + len(prefix)
    t0 = len(prefix)
    inputs = build_inputs(lm, [(prompt_ids, prefix + span_ids), (prompt_ids, prefix + foil_ids)])  # right padding
    T = inputs.target_ids.shape[1]
    weights = torch.zeros(2, T, device=lm.device)
    weights[0, t0:t0 + len(span_ids)] = 1.0
    weights[1, t0:t0 + len(foil_ids)] = -1.0
    logp, g = weighted_gradient(inputs, inputs.embeds, weights)  # [2, T], [2, L, D]
    diff = g[0, :C] + g[1, :C]  # [C, D]: the foil row already carries the minus sign
    totals = np.array([float(logp[0, t0:t0 + len(span_ids)].sum()), float(logp[1, t0:t0 + len(foil_ids)].sum())])
    embeds = inputs.embeds[:1, :C]  # [1, C, D]: the shared context
    values = {m: get_method(m).from_gradient(diff[None], embeds)[0].float().cpu().numpy() for m in methods}
    return values, totals


def contrastive_units(methods: Sequence[str], config: SalienceConfig = SalienceConfig()) -> int:
    """Units of work contrastive_salience reports as progress (see the module docstring)."""
    linear = [m for m in methods if not _of_difference(m)]
    per_continuation = int(any(get_method(m).from_gradient is not None for m in linear))
    for m in linear:
        if get_method(m).from_gradient is None:
            per_continuation += get_method(m).span_units(config)
    return 2 * per_continuation + int(any(_of_difference(m) for m in methods))


class _UnitCounter:
    """Turns compute_span_result's per-method progress into one count of units over several calls."""

    def __init__(self, progress: Progress | None, total: int):
        self.progress, self.total, self.base = progress, total, 0
        self.current: dict[str, int] = {}

    def __call__(self, method: str, done: int, total: int) -> None:  # compute_span_result's progress
        self.current[method] = done
        self._report()

    def add(self, units: int) -> None:
        """Closes the current call (its units are final) and adds `units` more."""
        self.base += sum(self.current.values()) + units
        self.current = {}
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress("contrastive", min(self.total, self.base + sum(self.current.values())), self.total)


def _as_generation(lm: LanguageModel, ids: tuple[int, ...]) -> Generation:
    text, offsets = decode_with_offsets(lm.tokenizer, list(ids))
    return Generation(text=text, ids=tuple(ids), offsets=offsets, stopped_by="length")


def _check_contrast(lm: LanguageModel, methods: Sequence[str], n_context: int, span_ids, foil_ids) -> None:
    """SalienceError naming the fix: a foil equal to the target, a context past the model's, or a method
    contrastive salience is not defined for."""
    if span_ids == foil_ids:
        raise SalienceError("The foil is the same text as the target. Fix: type a different alternative.")
    total = n_context + max(len(span_ids), len(foil_ids))
    if total > lm.max_length:
        raise SalienceError(f"prompt + foil is {total:,} tokens; this model's context is {lm.max_length:,}. "
                            "Fix: shorten the prompt or the foil.")
    for m in methods:
        if not get_method(m).linear and not _of_difference(m):
            usable = " or ".join(n for n in list_methods() if _of_difference(n))
            raise SalienceError(f"Contrastive salience is not defined for {m!r} (not linear in the target). "
                                f"Fix: use {usable} or a linear method.")


def _linear_differences(lm: LanguageModel, prompt, target, prefix, foil_ids, span: tuple[int, int], n_context: int,
                        linear: tuple[str, ...], config: SalienceConfig, counter: _UnitCounter, cancel: Cancel | None,
                        ) -> tuple[dict[str, np.ndarray], list[float]]:
    """({linear method: <float32>[C] span salience under the target minus under the foil}, [log p(target span),
    log p(foil)] from the same forward passes): each continuation's span salience, every method in one
    compute_span_result."""
    t0, t1 = span
    conts = ((target, t0, t1), (_as_generation(lm, prefix + foil_ids), t0, t0 + len(foil_ids)))
    spans = []
    for cont, a0, a1 in conts:
        spans.append(compute_span_result(lm, prompt, cont, methods=linear, t0=a0, t1=a1, config=config,
                                         progress=counter, cancel=cancel))
        counter.add(0)
    a, b = spans
    values = {m: (np.asarray(a.span_salience(m, t0, t1)[:n_context], np.float64)
                  - np.asarray(b.span_salience(m, t0, t0 + len(foil_ids))[:n_context], np.float64)).astype(np.float32)
              for m in linear}
    totals = [float(np.asarray(r.target_logprobs, np.float64)[t0:].sum()) for r in spans]
    totals[0] = float(np.asarray(a.target_logprobs, np.float64)[t0:t1].sum())
    return values, totals


def _context_fields(lm: LanguageModel, prompt, encoded, target, span: tuple[int, int], prefix: tuple[int, ...]) -> dict:
    """The ContrastiveResult fields of the context (the prompt, then the answer's first t0 tokens) and the
    target span's text."""
    t0, t1 = span
    if isinstance(target, Generation):
        target_text, target_offsets = target.text, tuple(target.offsets)
    else:
        tok = lm.tokenize(target)
        target_text, target_offsets = tok.text, tuple(tok.offsets)
    prompt_end = len(encoded.text)
    prefix_end = target_offsets[t0 - 1][1] if t0 else 0
    text = encoded.text + target_text[:prefix_end]
    offsets = list(encoded.offsets) + [(s + prompt_end, e + prompt_end) for s, e in target_offsets[:t0]]
    ids = tuple(encoded.ids) + prefix
    tokens = tuple(text[s:e] if e > s else lm.tokenizer.convert_ids_to_tokens(int(i)) for (s, e), i in zip(offsets, ids))
    special_ids = set(lm.tokenizer.all_special_ids)
    special = list(encoded.special) + [int(i) in special_ids for i in prefix]
    roles = prompt.role_spans if isinstance(prompt, ChatPrompt) else ((0, len(encoded.text), "user"),)
    span_start = target_offsets[t0][0] if t0 < len(target_offsets) else prefix_end
    return dict(text=text, tokens=tokens, offsets=np.asarray(offsets, dtype=np.int64).reshape(-1, 2),
                special=np.asarray(special, dtype=bool), role_spans=tuple(roles),
                target_text=target_text[span_start:target_offsets[t1 - 1][1]], prompt_end=prompt_end)


def contrastive_salience(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    foil: str | Generation,
    methods: Sequence[str] = DEFAULT_METHODS,
    *,
    span: tuple[int, int] | None = None,
    config: SalienceConfig = SalienceConfig(),
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> ContrastiveResult:
    """Salience of every context token for log p(target[t0:t1]) - log p(foil), both after prompt + target[:t0].

    Args:
      lm, prompt: as for compute_salience.
      target: the response (text, or a Generation used as is); foil: the alternative text (or Generation)
        for the selected span.
      methods: linear methods and non-linear gradient-at-the-input ones (the gradient norm); other
        non-linear methods raise SalienceError.
      span: (t0, t1) target tokens to contrast; None: the whole target.
      config: method settings (IG steps, SmoothGrad samples, ...).
      progress: progress("contrastive", units done, contrastive_units(methods, config)) as the
        work advances (after every batch of IG steps / SmoothGrad samples).
      cancel: () -> bool, checked between passes and batches of steps (raises ComputationCancelled).
    """
    methods = distinct_methods((methods,) if isinstance(methods, str) else methods)
    encoded = lm.encode_prompt(prompt)
    prompt_ids = tuple(encoded.ids)
    target_ids = scoring.target_ids(lm, target)
    t0, t1 = scoring.resolve_span(span, len(target_ids))
    foil_ids = scoring.target_ids(lm, foil)
    prefix, span_ids = target_ids[:t0], target_ids[t0:t1]
    C = len(prompt_ids) + t0  # the shared context: the prompt and the answer before the span
    _check_contrast(lm, methods, C, span_ids, foil_ids)
    values: dict[str, np.ndarray] = {}
    totals = None
    counter = _UnitCounter(progress, contrastive_units(methods, config))
    counter.add(0)  # 0 of total: the work is known before it starts
    direct = tuple(m for m in methods if _of_difference(m))
    if direct:
        scoring.check_cancel(cancel, "contrastive salience")
        direct_values, totals = _gradient_of_difference(lm, prompt_ids, prefix, span_ids, foil_ids, direct)
        values.update(direct_values)
        counter.add(1)
    linear = tuple(m for m in methods if not _of_difference(m))
    if linear:
        linear_values, linear_totals = _linear_differences(lm, prompt, target, prefix, foil_ids, (t0, t1), C, linear,
                                                           config, counter, cancel)
        values.update(linear_values)
        totals = linear_totals if totals is None else totals  # from the same forward passes
    if totals is None:  # no method at all: log-probs from two forward passes
        totals = [float(scoring.score(lm, [prompt_ids + prefix], ids, (0, len(ids)))[0]) for ids in (span_ids, foil_ids)]
    return ContrastiveResult(
        **_context_fields(lm, prompt, encoded, target, (t0, t1), prefix),
        foil_text=foil.text if isinstance(foil, Generation) else foil,
        target_logprob=float(totals[0]), foil_logprob=float(totals[1]), values={m: values[m] for m in methods},
        n_prompt_tokens=len(prompt_ids), span=(t0, t1),
    )
