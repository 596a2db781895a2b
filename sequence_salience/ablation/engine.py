"""Segment salience: the value of each prompt segment for a target span, measured by removing segments.

    prompt + target -> removable segments at a granularity (scoring.prompt_segments, the
    explanation tests' own) -> the method's ablated prompts (scoring.PromptEditor: filler
    or deletion) -> batched forwards from each ablation's first changed token (ablation/prefix.py)
    -> the method's values per segment (methods/leave_one_out.py, methods/ablation_surrogate.py,
    methods/coarse_to_fine.py: it also gets the units of the coarser granularities holding each segment).

No backward pass. The values live on one segmentation: a change of granularity (or pattern,
removal, span) is a new computation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Mapping

import numpy as np

from sequence_salience import aggregate, scoring
from sequence_salience.ablation.prefix import Cancel, Cost, PrefixScorer, PrefixStats, Progress, costed, report
from sequence_salience.threads import PassSizes, ThreadChooser
from sequence_salience.attention.features import FAMILIES, AttentionRecorder, span_rows
from sequence_salience.errors import SalienceError
from sequence_salience.methods import get_segment_method, grad_norm
from sequence_salience.methods.base import (SEGMENT_REMOVALS, AblationConfig, SegmentProblem, SegmentTokens,
                                            unmeasured_note)
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.result import SalienceResult
from sequence_salience.salience import compute_span_salience, pair_tokens
from sequence_salience.slices import SliceSizer
from sequence_salience.text import ChatPrompt


@dataclasses.dataclass(frozen=True)
class SegmentSalience:
    """The values of one segment method for one target span, on one segmentation of the prompt.

    Attributes:
      method: the segment method's name; granularity, pattern: the segmentation; removal: how
        segments were removed ("filler" or "delete"); span: (t0, t1) target tokens explained.
      text, prompt_end: prompt + target as one string, and where the target starts.
      segments: S character spans (start, end) of the removable segments, in text order.
      segment_tokens: S arrays of token indices (into the result's tokens) of each segment.
      segment_index: <int64>[S] index of each into aggregate.segment(text, ...) at this granularity.
      values: <float64>[S] the method's value of each segment (positive: it raises p(target)).
      original_logprob: log p(target span | the unedited prompt).
      kept: <bool>[R, S] the ablations scored (True = segment kept); logprobs: <float64>[R] their log p.
      quality: the fit's figures (the surrogate's held-out "r2" with its spread "r2_low" / "r2_high" over
        random splits, "correlation", "intercept").
      warning: "" or what makes the values doubtful (a poor surrogate fit), with what to do.
      stats: the forward work (rows, tokens, tokens recomputed; the share the cached prefix saved).
      n_tokens: N, tokens of prompt + target (for token_values).
      result: the SalienceResult of the pair the values were computed on (tokens, offsets, roles;
        the caller's own when one was passed), so that display can draw them (display.show(seg)).
      measured: <bool>[S] whether each segment's own value was measured (False: coarse_to_fine did not refine
        the coarser unit holding it, a unit that did not matter; its value is the unit's shared evenly);
        None: every value was measured.
      coarse_values: None, or <float64>[S] the measured value of that unit (NaN where measured).
      coarse_granularity: S names of that unit's granularity ("" where measured); () when all were measured.
      filler: the filler of a "filler" removal (AblationConfig.filler); None when not recorded.
    """

    method: str
    granularity: str
    pattern: str | None
    removal: str
    span: tuple[int, int]
    text: str
    prompt_end: int
    segments: tuple[tuple[int, int], ...]
    segment_tokens: tuple[np.ndarray, ...]
    segment_index: np.ndarray
    values: np.ndarray
    original_logprob: float
    kept: np.ndarray
    logprobs: np.ndarray
    quality: Mapping[str, float]
    warning: str
    stats: PrefixStats
    n_tokens: int
    result: SalienceResult | None = dataclasses.field(default=None, compare=False, repr=False)
    measured: np.ndarray | None = None
    coarse_values: np.ndarray | None = None
    coarse_granularity: tuple[str, ...] = ()
    filler: str | int | None = None

    def measured_mask(self) -> np.ndarray:
        """<bool>[S] whether each segment's own value was measured (all True but for coarse_to_fine)."""
        return np.ones(len(self.segments), dtype=bool) if self.measured is None else np.asarray(self.measured, bool)

    def coarse_note(self, s: int) -> str:
        """"" for a measured segment s, else what its value is: "inside a sentence that did not matter
        (coarse value 0.012)"."""
        if self.measured_mask()[s]:
            return ""
        return unmeasured_note(self.coarse_granularity[s], float(self.coarse_values[s]))

    def segment_texts(self) -> list[str]:
        return [self.text[s:e] for s, e in self.segments]

    def token_values(self) -> np.ndarray:
        """<float32>[N]: each segment's value spread evenly over its tokens, 0 elsewhere, so that
        summing tokens per segment at this granularity gives the values back (aggregate, "sum")."""
        out = np.zeros(self.n_tokens, dtype=np.float64)
        for toks, v in zip(self.segment_tokens, self.values):
            out[toks] = v / len(toks)
        return out.astype(np.float32)

    def ranked(self) -> list[int]:
        """Segment positions, largest value first (ties: text order)."""
        return [int(i) for i in np.argsort(-self.values, kind="stable")]

    def to_json(self) -> dict:
        """A JSON-able summary: the segments, their texts and values (and for coarse_to_fine whether each was
        measured, with its coarser unit's value and granularity where not), the fit and the cost."""
        measured = self.measured_mask()
        coarse = [None if m else {"coarse_value": float(self.coarse_values[i]),
                                  "coarse_granularity": self.coarse_granularity[i]} for i, m in enumerate(measured)]
        return {
            "method": self.method, "granularity": self.granularity, "pattern": self.pattern,
            "removal": self.removal, "span": list(self.span),
            "segments": [{"start": s, "end": e, "text": self.text[s:e], "value": float(v), "measured": bool(m),
                          **(c or {})}
                         for (s, e), v, m, c in zip(self.segments, self.values, measured, coarse)],
            "original_logprob": self.original_logprob,
            "quality": {k: float(v) for k, v in self.quality.items()}, "warning": self.warning,
            "rows": self.stats.rows, "tokens": self.stats.tokens, "tokens_computed": self.stats.computed,
            "prefix_reuse": self.stats.reuse,
        }

    def show(self, **options) -> None:
        """Shows the prompt coloured by segment value (HTML in a notebook, rich text in a terminal)."""
        from sequence_salience import display  # pylint: disable=import-outside-toplevel

        display.show(self, **options)

    def _repr_html_(self) -> str:
        from sequence_salience import display  # pylint: disable=import-outside-toplevel

        return display.render_html(self, document=False)


def fit_warning(method: str, quality: Mapping[str, float], config: AblationConfig) -> str:
    """What makes a segment method's values doubtful, with what to do (its record's `warning`: the surrogate's
    fit); "" for a good fit, no fit or a method without one."""
    warning = get_segment_method(method).warning
    return warning(quality, config) if warning is not None else ""


def segment_salience(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    method: str,
    *,
    granularity: str = "sentence",
    pattern: str | None = None,
    span: tuple[int, int] | None = None,
    config: AblationConfig = AblationConfig(),
    regions: scoring.Regions | None = None,
    result: SalienceResult | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    slice_s: "float | SliceSizer | None" = None,
    threads: ThreadChooser | PassSizes | None = None,
    known: SegmentSalience | None = None,
    partial: Callable[[SegmentSalience], None] | None = None,
) -> SegmentSalience:
    """The values of a segment method for log p(target[t0:t1]), one per removable prompt segment.

    Args:
      lm, prompt, target: as for compute_salience.
      method: a segment method (methods.list_segment_methods()).
      granularity, pattern: the segments (aggregate.GRANULARITIES; pattern for "regex").
      span: (t0, t1) target tokens; None: the whole target.
      config: removal, filler, the surrogate's settings, batching (AblationConfig).
      regions: optional character ranges of the prompt text to which removal is limited.
      result: a SalienceResult of this prompt and target (tokens, offsets, roles); without one the
        pair is tokenized here (no extra model pass). When it holds grad_norm's salience of the span (the
        server's first highlight), a method that reads the span's gradient (attention_verified) takes it from
        there instead of a forward + backward of its own.
      progress: progress(stage, rows done, rows); stage: the method's name, or for a method scoring in
        several calls its stage ("coarse pass", "refining"), rows: those known so far; a `costed` progress also gets
        the rows' known `Cost` (positions recomputed) where one scoring call is the whole stage (leave one out);
        cancel: () -> bool, checked between batches.
      slice_s: None, or seconds: forward batches of about that much model time.
      threads: the torch intra-op thread count of the forward batches (sequence_salience/threads.py); None: the
        cheaper of torch's count and 1, measured while the batches run; a PassSizes kept across calls (a server's)
        measures it across them.
      known: an earlier result of a method whose measured values are exact leave-one-out (record `exact_measured`:
        the first map attention_verified's verified segments) on this prompt and target: leave_one_out takes those
        values from it instead of scoring them (SegmentProblem.known), when `known_values` finds every setting
        equal; else every segment is scored. When it holds every segment's value (checked against `result`'s
        unedited log p: `all_known`), the unedited prompt's log-probs are `result`'s and no model pass runs.
      partial: called with the method's results so far, as a SegmentSalience, before it returns (a method that
        reports them: attention_verified's estimate, then after each verification batch; SegmentProblem.partial).
    """
    record = get_segment_method(method)
    if config.removal not in SEGMENT_REMOVALS:
        raise SalienceError(f"Unknown removal {config.removal!r}. Fix: use one of {', '.join(SEGMENT_REMOVALS)}.")
    # The segments come first, from the pair's tokens alone without a result: a pattern that backtracks past its
    # budget or matches nothing is refused before any model pass (was: after the unedited forward).
    paired = result if result is not None else pair_tokens(lm, prompt, target)
    prompt_ids, target_ids = _pair_ids(prompt, paired)
    t0, t1 = scoring.resolve_span(span, len(target_ids))
    frame = ProgressFrame(method)
    segs = removable_segments(paired, granularity, pattern, regions)
    # The first highlight's gradient pass may have left the unedited prompt's keys and values and the span's attention
    # (compute_span_result(record=span_recorder)): then no unedited forward here.
    layers, recorded = (result.unedited.take() if result is not None and result.unedited is not None
                        and tuple(result.unedited.span) == (t0, t1) and config.reuse_prefix else (None, None))
    unedited = (result.target_logprobs, layers) if layers is not None else None
    # A method reading the span's attention gets it from the unedited prompt's forward, which the scorer runs anyway.
    recorder = (span_recorder(lm, len(prompt_ids), len(prompt_ids) + len(target_ids), (t0, t1))
                if record.reads_attention else None)
    if unedited is not None:
        recorder = recorded if recorder is not None else None
    elif recorder is None and all_known(known, result, segs, (t0, t1), granularity, pattern, config):
        # Leave one out after a first map that verified every segment: nothing is left to score, and the unedited
        # prompt's log-probs are the result's (the first highlight's pass): no model pass at all.
        unedited = (result.target_logprobs, None)
    with recorder if recorder is not None and unedited is None else contextlib.nullcontext():
        scorer = PrefixScorer(lm, prompt_ids, target_ids, (t0, t1), reuse=config.reuse_prefix, unedited=unedited,
                              batch_size=config.batch_size, chunk_token_budget=config.chunk_token_budget,
                              slice_s=slice_s, progress=None if progress is None else frame.wrap(progress),
                              cancel=cancel, stage=method, threads=threads)
    if result is None:  # the pair's tokens with the unedited log-probs just scored
        result = dataclasses.replace(paired, target_logprobs=np.asarray(scorer.token_logprobs, dtype=np.float32))
    editor = scoring.PromptEditor(lm, prompt, result, segs, config.removal, scoring.filler_id(lm, config.filler))
    coarse = record.coarser(granularity) if record.coarser is not None else ()
    span_features = recorder.features(0, segs.tokens) if recorder is not None and recorder.complete else None
    tokens = SegmentTokens(lm, tuple(int(i) for i in result.ids), result.n_prompt_tokens, (t0, t1), tuple(segs.tokens),
                           span_features=span_features,
                           span_gradient=span_gradient(lm, prompt, target, result, (t0, t1)))

    def salience_of(out) -> SegmentSalience:
        return SegmentSalience(
            method=method, granularity=granularity, pattern=pattern, removal=config.removal, span=(t0, t1),
            filler=config.filler,
            text=result.text, prompt_end=result.prompt_end, original_logprob=scorer.original_logprob,
            warning=fit_warning(method, out.quality, config), stats=dataclasses.replace(scorer.stats),  # as of now
            n_tokens=len(result.ids), result=result, **_segment_fields(segs), **_computed_fields(out),
        )

    problem = SegmentProblem(
        tokens=tokens, n_segments=len(segs), edit=editor, score=scorer, original_logprob=scorer.original_logprob,
        span_tokens=t1 - t0, parents=parent_units(result, segs, coarse), parent_granularities=coarse, frame=frame.set,
        known=known_values(known, result.text, (t0, t1), granularity, pattern, tuple(segs.spans), config,
                           scorer.original_logprob),
        **({} if partial is None else {"partial": lambda out: partial(salience_of(out))}))
    return salience_of(record.compute(problem, config))


def span_recorder(lm: LanguageModel, n_prompt_tokens: int, n_tokens: int, span: tuple[int, int]
                  ) -> AttentionRecorder | None:
    """An AttentionRecorder of the span's rows over the pair's n_tokens positions, or None for a family it does not
    read (also compute_span_result's `record`: the first highlight's pass records it for the first map)."""
    if getattr(lm.model.config, "model_type", "") not in FAMILIES:
        return None
    return AttentionRecorder(lm.model, [span_rows(n_prompt_tokens, span)], n_tokens)


# How far the unedited prompt's log p(span) of a known result may be from this call's (batching's float noise is
# about 1e-6 on CPU, another model's differs by far more).
KNOWN_LOGPROB_TOL = 1e-4


def known_values(known: SegmentSalience | None, text: str, span: tuple[int, int], granularity: str,
                 pattern: str | None, segments: tuple[tuple[int, int], ...], config: AblationConfig,
                 original_logprob: float) -> dict[int, float]:
    """{segment position: exact leave-one-out value} of `known`'s measured segments, when `known` is a result of a
    method whose measured values are exact leave-one-out (record `exact_measured`) with the same prompt + target
    text, span, granularity, pattern, segments (character spans), removal and filler, and the same log p(span) of
    the unedited prompt within KNOWN_LOGPROB_TOL (another model's result differs); else {} (score them all)."""
    if known is None or not get_segment_method(known.method).exact_measured:
        return {}
    same = (known.text == text and tuple(known.span) == tuple(span) and known.granularity == granularity
            and known.pattern == pattern and tuple(known.segments) == tuple(segments)
            and known.removal == config.removal and known.filler == config.filler
            and abs(float(known.original_logprob) - float(original_logprob)) <= KNOWN_LOGPROB_TOL)
    if not same:
        return {}
    return {int(s): float(known.values[s]) for s in np.flatnonzero(known.measured_mask())}


def removable_segments(result: SalienceResult, granularity: str, pattern: str | None,
                       regions: scoring.Regions | None) -> scoring.PromptSegments:
    """The prompt's removable segments (regex: the matches); SalienceError when there are none."""
    segs = scoring.prompt_segments(result, granularity, pattern, regions).matches_only()
    if len(segs) == 0:
        raise SalienceError(f"The prompt has no removable {granularity} segments (only template markup or "
                            "special tokens). Fix: pick another granularity, or a pattern that matches the prompt.")
    return segs


def all_known(known: SegmentSalience | None, result: SalienceResult | None, segs: scoring.PromptSegments | None,
              span: tuple[int, int], granularity: str, pattern: str | None, config: AblationConfig) -> bool:
    """Whether `known` (segment_salience's) holds an exact value of every segment `segs` of `result`'s prompt at
    these settings (`known_values`), checked against the unedited log p(span) that `result` holds (its pass's): then
    a method that takes known values (leave one out) has nothing left to score."""
    if (known is None or result is None or segs is None or not config.reuse_prefix
            or len(result.target_logprobs) < span[1]):
        return False
    original = float(np.asarray(result.target_logprobs[span[0]:span[1]], dtype=np.float64).sum())
    return len(segs) == len(known_values(known, result.text, span, granularity, pattern, tuple(segs.spans), config,
                                         original))


def span_gradient(lm: LanguageModel, prompt, target, result: SalienceResult, span: tuple[int, int]
                  ) -> Callable[[], np.ndarray]:
    """() -> <float32>[N] grad_norm's salience of log p(target[t0:t1]) (SegmentTokens.span_gradient): from `result`
    when it holds that span (no model pass), else one forward + backward (compute_span_salience) on the first call,
    kept for the next."""
    t0, t1 = span

    @functools.cache
    def gradient() -> np.ndarray:
        if result.has_span(grad_norm.NAME, t0, t1):
            return np.asarray(result.span_salience(grad_norm.NAME, t0, t1), dtype=np.float32)
        return compute_span_salience(lm, prompt, target, grad_norm.NAME, t0, t1)

    return gradient


def _pair_ids(prompt, result: SalienceResult) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids) from `result` (SalienceError when it is another prompt's)."""
    if result.text[:result.prompt_end] != scoring.prompt_text(prompt):
        raise SalienceError("`result` was computed for another prompt. Fix: pass the result of this prompt.")
    return ([int(i) for i in result.ids[:result.n_prompt_tokens]],
            [int(i) for i in result.ids[result.n_prompt_tokens:]])


def _segment_fields(segs: scoring.PromptSegments) -> dict:
    """The SegmentSalience fields of the removable segments."""
    return dict(segments=tuple(segs.spans), segment_tokens=tuple(segs.tokens),
                segment_index=np.asarray(segs.index, dtype=np.int64))


def _computed_fields(out) -> dict:
    """The SegmentSalience fields of what the method computed (its SegmentValues), as arrays."""
    return dict(values=np.asarray(out.values, dtype=np.float64), kept=np.asarray(out.kept, dtype=bool),
                logprobs=np.asarray(out.logprobs, dtype=np.float64), quality=dict(out.quality),
                measured=None if out.measured is None else np.asarray(out.measured, dtype=bool),
                coarse_values=None if out.coarse_values is None else np.asarray(out.coarse_values, dtype=np.float64),
                coarse_granularity=tuple(out.coarse_granularity))


def parent_units(result: SalienceResult, segs: scoring.PromptSegments, granularities: tuple[str, ...]
                 ) -> tuple[np.ndarray, ...]:
    """For each of `granularities`, <int64>[S] the unit (index into its segmentation) holding each removable
    segment: the unit of the segment's first token."""
    first = np.array([int(t[0]) for t in segs.tokens], dtype=np.int64)  # [S]
    return tuple(aggregate.segment(result.text, result.offsets, g, role_spans=result.role_spans).token_segment[first]
                 .astype(np.int64) for g in granularities)


class ProgressFrame:
    """The progress of a segment method's `score` calls as one count: `set(label, before, total)` (the method's
    SegmentProblem.frame) says how the next calls count; `wrap(progress)` reports the scorer's per-call
    (done, rows) as (label, before + done, at least total)."""

    def __init__(self, stage: str):
        self.label, self.before, self.total, self.end = stage, 0, 0, 0

    def set(self, label: str, before: int, total: int, end: int | None = None) -> None:
        """The next calls count from `before` toward `total`; their last report says `end` (default: `total`)."""
        self.label, self.before, self.total = label, int(before), int(total)
        self.end = self.total if end is None else int(end)

    def wrap(self, progress: Progress) -> Progress:
        """The scorer's progress as the frame's; a `costed` progress gets the call's `Cost` when the call is the whole
        frame (leave one out's one call), and none when the frame spans several calls (their costs are not known
        ahead)."""

        def frame_report(stage: str, done: int, rows: int, cost: Cost | None = None) -> None:
            total = max(self.total, self.before + rows)
            whole = self.before == 0 and total == rows
            # rows: the call's distinct changed prompts (the scorer skips repeats): its last report is the frame's end
            end = max(self.end, self.before + rows)
            report(progress, self.label, end if done >= rows else self.before + done, total, cost if whole else None)

        return costed(frame_report) if getattr(progress, "takes_cost", False) else frame_report
