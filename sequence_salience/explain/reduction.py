"""Input reduction (Feng et al. 2018, https://arxiv.org/abs/1804.07781), for generated text.

Find a small prompt that still makes the model produce the same response: remove the
least salient segment first (at any granularity), keep the removal when the response
survives, otherwise put the segment back and try the next one.

Removal (`removal=`), as for the faithfulness curves:
* "delete" (default): the segment's text is deleted and the prompt re-tokenized, so the
  reduced prompt is exactly what a user gets by pasting it into the editor;
* "filler": every token of the segment becomes the filler token (default: the single token
  of " "), so positions and the token count stay the same and only the content changes. The
  guarantee holds for `reduced_ids`; `reduced_text` is their text (each removed token's text
  replaced by the filler's), and re-tokenizing it may merge neighbouring fillers into other
  tokens.

Criteria (`criterion=`):
* "greedy" (default): the target must still be the model's greedy response: every target
  token stays the argmax after its prefix and, when the original response ended with a
  stop token, a stop token still follows (teacher forcing; the same as regenerating).
  The target must then be the model's own greedy response to the original prompt.
* "logprob": log p(target span) may drop by at most `tolerance` nats.

Checks are batched speculatively: the next `batch_size` candidates are tried as growing
prefixes (current + c1, current + c1 + c2, ...) in one forward batch; the longest passing
prefix is accepted, which is exactly what checking them one by one would accept. A step
budget (checks) and a time budget bound the search; the report says which one stopped it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sequence_salience import scoring
from sequence_salience.errors import SalienceError
from sequence_salience.explain.faithfulness import segment_salience
from sequence_salience.methods import grad_norm
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.result import SalienceResult
from sequence_salience.scoring import Cancel, Progress
from sequence_salience.slices import make_sizer
from sequence_salience.text import ChatPrompt

CRITERIA = ("greedy", "logprob")


@dataclasses.dataclass(frozen=True)
class ReductionConfig:
    """Settings of reduce_prompt.

    Attributes:
      method: salience method that orders the segments (least salient removed first).
      granularity, pattern: segments to remove (aggregate.GRANULARITIES).
      criterion: "greedy" or "logprob" (see the module docstring); tolerance: nats, for "logprob".
      max_steps: most candidate checks (forward rows); max_seconds: wall-clock budget.
      batch_size: candidates checked per forward batch.
      removal: "delete" (delete the text, re-tokenize) or "filler" (replace tokens, keep positions).
      filler: the filler token for "filler", as a one-token text or a token id.
      regions: optional character ranges of the prompt text to which removal is limited
        (e.g. the user's message: the reduced prompt must be loadable into an editor).
      slice_s: None, or seconds: each speculative batch checks as many candidates (at most
        batch_size) as took about this much model time on the batch before (the result does
        not depend on it: a batch accepts its longest passing prefix, as one-by-one checks would).
    """

    method: str = grad_norm.NAME
    granularity: str = "sentence"
    pattern: str | None = None
    criterion: str = "greedy"
    tolerance: float = 1.0
    max_steps: int | None = 200
    max_seconds: float | None = 120.0
    batch_size: int = scoring.DEFAULT_BATCH_SIZE
    removal: str = "delete"
    filler: str | int = " "
    regions: tuple[tuple[int, int], ...] | None = None
    slice_s: float | None = None


@dataclasses.dataclass(frozen=True)
class ReductionResult:
    """The reduced prompt and how it was found.

    Attributes:
      prompt_text: the original prompt text; reduced_text: it with the removed segments deleted
        (removal "filler": each removed token replaced by the filler text).
      reduced_ids: token ids of the reduced prompt, the ones that were checked.
      segments: (start, end) character spans of the removable segments (text order).
      segment_texts: their texts; segment_token_spans: the character spans of each one's tokens.
      removal: "delete" or "filler"; filler_id, filler_text: the filler token (-1, "" for "delete").
      removed: positions into `segments`, in the order they were removed.
      rejected: positions tried and kept because removing them changed the response.
      criterion, tolerance, needs_stop: the check used (needs_stop: a stop token must follow).
      original_logprob, reduced_logprob: log p(target span) before and after.
      n_checks: candidate checks run; stopped_by: "done", "steps" or "time"; seconds: time taken.
    """

    prompt_text: str
    reduced_text: str
    segments: tuple[tuple[int, int], ...]
    segment_texts: tuple[str, ...]
    removed: tuple[int, ...]
    rejected: tuple[int, ...]
    criterion: str
    tolerance: float
    needs_stop: bool
    original_logprob: float
    reduced_logprob: float
    span: tuple[int, int]
    n_checks: int
    stopped_by: str
    seconds: float
    reduced_ids: tuple[int, ...] = ()
    segment_token_spans: tuple[tuple[tuple[int, int], ...], ...] = ()
    removal: str = "delete"
    filler_id: int = -1
    filler_text: str = ""

    @property
    def removed_spans(self) -> list[tuple[int, int]]:
        return [self.segments[r] for r in self.removed]

    def reduce_range(self, start: int, end: int) -> str:
        """The original prompt's text[start:end] with the removed segments deleted, or each of
        their tokens replaced by the filler text (e.g. one chat message's content, located by
        the prompt's role spans)."""
        if self.removal == "filler":
            spans = [sp for r in self.removed for sp in self.segment_token_spans[r]]
            return scoring.replace_spans(self.prompt_text, spans, [self.filler_text] * len(spans), start, end)
        return scoring.delete_spans(self.prompt_text, self.removed_spans, start, end)


def _remove_in_order(lm: LanguageModel, ids_without: scoring.PromptEditor, target_ids, span: tuple[int, int],
                     candidates: list[int], passes, lp0: float, config: ReductionConfig, budget: scoring.Budget,
                     progress: Progress | None, cancel: Cancel | None) -> tuple[list[int], list[int], float, str]:
    """Tries removing `candidates` in order, in batches of growing prefixes (one forward per batch): the
    longest prefix that `passes` is removed, the candidate after it rejected. Returns (removed, rejected,
    log p(span) of the reduced prompt, stopped_by: "done" or the budget that ran out)."""
    removed: list[int] = []
    rejected: list[int] = []
    current_lp = lp0
    queue = list(candidates)
    stopped_by = "done"
    sizer = make_sizer(config.slice_s)
    while queue:
        stopped_by = budget.exhausted() or "done"
        if stopped_by != "done":
            break
        scoring.check_cancel(cancel, "input reduction")
        n = min(config.batch_size if sizer is None else sizer.units(config.batch_size), len(queue))
        left = budget.left()
        if left is not None:
            n = min(n, left)
        trial = [removed + queue[:j + 1] for j in range(n)]
        start = sizer.clock() if sizer is not None else 0.0
        lp, greedy, stop = scoring.score_greedy(lm, [ids_without(r) for r in trial], target_ids, span, n)
        if sizer is not None:
            sizer.record(n, sizer.clock() - start)
        ok = passes(lp, greedy, stop)
        budget.spend(n)
        accepted = int(np.argmin(ok)) if not ok.all() else n  # longest passing prefix
        if accepted:
            removed += queue[:accepted]
            current_lp = float(lp[accepted - 1])
        if accepted < n:
            rejected.append(queue[accepted])
            queue = queue[accepted + 1:]
        else:
            queue = queue[n:]
        if progress is not None:
            progress("reduce", len(removed) + len(rejected), len(candidates))
    return removed, rejected, current_lp, "done" if not queue else stopped_by


def reduce_prompt(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    *,
    span: tuple[int, int] | None = None,
    config: ReductionConfig = ReductionConfig(),
    salience_config: SalienceConfig = SalienceConfig(),
    result: SalienceResult | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> ReductionResult:
    """Removes prompt segments, least salient first, while the response survives.

    Args:
      lm, prompt, target: as for compute_salience; for criterion "greedy" the target must be
        the model's greedy response to the prompt.
      span: target tokens whose salience orders the segments (and, for "logprob", whose
        log-prob is kept); None: the whole target.
      config: ReductionConfig; result: a SalienceResult of this pair to take the salience from.
      progress: progress("reduce", checks done, candidates); cancel: () -> bool.
    """
    if config.criterion not in CRITERIA:
        raise SalienceError(f"Unknown criterion {config.criterion!r}. Fix: use one of {', '.join(CRITERIA)}.")
    budget = scoring.Budget(config.max_steps, config.max_seconds)
    target_ids = scoring.target_ids(lm, target) if result is None else tuple(
        int(i) for i in result.ids[result.n_prompt_tokens:])
    t0, t1 = scoring.resolve_span(span, len(target_ids))
    result, values = segment_salience(lm, prompt, target, (config.method,), (t0, t1), result, salience_config)
    segs = scoring.prompt_segments(result, config.granularity, config.pattern, config.regions)
    text = result.text[:result.prompt_end]
    scores = segs.scores(values[config.method])  # [S]
    candidates = [int(i) for i in np.argsort(scores, kind="stable")]  # least salient first

    fill = scoring.filler_id(lm, config.filler) if config.removal == "filler" else -1
    ids_without = scoring.PromptEditor(lm, prompt, result, segs, config.removal, fill)
    original = ids_without(())
    lp0, greedy0, stop0 = scoring.score_greedy(lm, [original], target_ids, (t0, t1))
    needs_stop = bool(stop0[0])
    if config.criterion == "greedy" and not greedy0[0]:
        raise SalienceError(
            "criterion='greedy' keeps the model's greedy response, but this target is not what the model "
            "generates for the prompt. Fix: explain the generated response, or use criterion='logprob'.")
    floor = float(lp0[0]) - config.tolerance

    def passes(lp: np.ndarray, greedy: np.ndarray, stop: np.ndarray) -> np.ndarray:
        if config.criterion == "logprob":
            return lp >= floor
        return greedy & (stop | (not needs_stop))

    removed, rejected, current_lp, stopped_by = _remove_in_order(
        lm, ids_without, target_ids, (t0, t1), candidates, passes, float(lp0[0]), config, budget, progress, cancel)
    return ReductionResult(
        prompt_text=text, reduced_text=ids_without.edited_text(removed), reduced_ids=ids_without(removed),
        segment_token_spans=tuple(ids_without.token_spans(r) for r in range(len(segs))), removal=config.removal,
        filler_id=fill,
        filler_text=ids_without.filler_text if config.removal == "filler" else "",
        segments=segs.spans, segment_texts=tuple(segs.texts(result.text)), removed=tuple(removed),
        rejected=tuple(rejected), criterion=config.criterion, tolerance=config.tolerance, needs_stop=needs_stop,
        original_logprob=float(lp0[0]), reduced_logprob=current_lp, span=(t0, t1), n_checks=budget.steps,
        stopped_by=stopped_by, seconds=budget.seconds,
    )
