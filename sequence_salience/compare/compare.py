"""Compare two salience results: aligned prompts with both values per segment on one shared scale,
the difference (B − A) per aligned segment, the word diff of the responses, and the log p of A's
response under both (the cross log-probs).

`compare_results` works on any two results (two prompts and one model: `compare`; one prompt and
two models: the same pieces); `compare` runs the model: generation (unless responses are given),
the whole response's salience of each side (compute_span_result: one forward + backward for the
gradient methods, as `explain` does) and ONE teacher-forced forward for A's response under prompt B.
"""

from __future__ import annotations

import numpy as np

from sequence_salience import aggregate
from sequence_salience.compare.alignment import align_segmentations, align_texts, aligned_values, difference
from sequence_salience.compare.comparison import SalienceComparison
from sequence_salience.compare.cross import CrossLogprobs, TokenLogprobs, response_logprobs
from sequence_salience.display import palette
from sequence_salience.display.view import resolve_method, token_values
from sequence_salience.errors import SalienceError
from sequence_salience.methods import get_method, grad_x_input
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.model import Generation, GenerationConfig, LanguageModel
from sequence_salience.result import SalienceResult
from sequence_salience.salience import compute_span_result
from sequence_salience.text import ChatPrompt

DEFAULT_METHOD = grad_x_input.NAME
DEFAULT_LABELS = ("A", "B")


def _segment_values(result: SalienceResult, method: str, granularity: str, pattern: str | None):
    seg = aggregate.segment(result.text, result.offsets, granularity, pattern=pattern, role_spans=result.role_spans)
    values = aggregate.aggregate(token_values(result, method, 0, result.num_targets), seg, "sum")  # [S]
    return seg, values


def compare_results(
    result_a: SalienceResult,
    result_b: SalienceResult,
    *,
    method: str | None = None,
    granularity: str = "word",
    pattern: str | None = None,
    cross: CrossLogprobs | None = None,
    labels: tuple[str, str] = DEFAULT_LABELS,
) -> SalienceComparison:
    """Aligns two results and puts their whole-response salience on one scale; no model pass.

    Args:
      result_a, result_b: e.g. from compute_salience / compute_span_result (each must hold `method`
        for its whole response).
      method: the salience method (default: gradient x input if both have it, else the first of A's).
      granularity: aggregate.GRANULARITIES ("regex" needs pattern).
      cross: optional cross log-probs to carry along (compare() computes them).
      labels: names of the two sides.
    """
    if granularity not in aggregate.GRANULARITIES:
        raise SalienceError(f"Unknown granularity {granularity!r}. Fix: use one of {', '.join(aggregate.GRANULARITIES)}.")
    whole_a, whole_b = (0, result_a.num_targets), (0, result_b.num_targets)
    if method is None:
        both_have = result_a.has_span(DEFAULT_METHOD) and result_b.has_span(DEFAULT_METHOD)
        method = DEFAULT_METHOD if both_have else resolve_method(result_a, None, whole_a)
    method = resolve_method(result_a, method, whole_a)
    resolve_method(result_b, method, whole_b)
    seg_a, seg_values_a = _segment_values(result_a, method, granularity, pattern)
    seg_b, seg_values_b = _segment_values(result_b, method, granularity, pattern)
    prompts = align_segmentations(result_a.text, seg_a, result_b.text, seg_b,
                                  region_a=(0, result_a.prompt_end), region_b=(0, result_b.prompt_end))
    values_a, values_b = aligned_values(prompts, seg_values_a, seg_values_b)
    diff = difference(prompts, values_a, values_b)
    signed = get_method(method).signed
    both = np.concatenate([values_a, values_b])
    return SalienceComparison(
        result_a=result_a, result_b=result_b, method=method, granularity=granularity, pattern=pattern,
        labels=(str(labels[0]), str(labels[1])), prompts=prompts,
        responses=align_texts(result_a.text[result_a.prompt_end:], result_b.text[result_b.prompt_end:], "word"),
        values_a=values_a, values_b=values_b, difference=diff,
        scale=palette.ColorScale(signed=signed, scale=palette.max_abs(both[np.isfinite(both)])),
        difference_scale=palette.ColorScale(signed=True, scale=palette.max_abs(diff[np.isfinite(diff)])),
        cross=cross,
    )


def _as_prompt(lm: LanguageModel, prompt, system: str | None, chat: bool | None) -> ChatPrompt:
    if isinstance(prompt, ChatPrompt):
        return prompt
    if not isinstance(prompt, str):
        raise SalienceError(f"A prompt is a {type(prompt).__name__}. Fix: pass a str or a ChatPrompt.")
    if not prompt.strip():
        raise SalienceError("A prompt is empty. Fix: pass two non-empty prompts.")
    return lm.format_prompt(prompt, system=system, chat=chat)


def compare(
    lm: LanguageModel,
    prompt_a: str | ChatPrompt,
    prompt_b: str | ChatPrompt,
    *,
    method: str = DEFAULT_METHOD,
    granularity: str = "word",
    pattern: str | None = None,
    response_a: str | Generation | None = None,
    response_b: str | Generation | None = None,
    same_response: bool = False,
    system: str | None = None,
    chat: bool | None = None,
    generation: GenerationConfig = GenerationConfig(),
    config: SalienceConfig = SalienceConfig(),
    labels: tuple[str, str] = DEFAULT_LABELS,
) -> SalienceComparison:
    """What an edit of the prompt changed: the answer, the old answer's probability, and the salience.

    Args:
      lm: a loaded model.
      prompt_a, prompt_b: the original and the edited prompt: user text (formatted with the chat
        template when the model has one, see `chat`) or ready ChatPrompts.
      method: the salience method (one of list_methods()).
      granularity, pattern: the aligned segments (aggregate.GRANULARITIES).
      response_a, response_b: the responses to explain; None: the greedy generation (`generation`).
      same_response: explain A's response under prompt B too (response_b is then A's response): "the
        salience of the old answer under the new prompt"; its log p under B then comes from that
        result's own forward.
      system, chat: as LanguageModel.format_prompt, for str prompts.
      config: method settings.
      labels: names of the two sides.

    Cost: the generations (unless given), one salience computation per side (one forward + backward
    for the gradient methods) and one forward without gradients for A's response under prompt B
    (none with same_response).
    """
    get_method(method)
    pa, pb = _as_prompt(lm, prompt_a, system, chat), _as_prompt(lm, prompt_b, system, chat)
    if same_response and response_b is not None:
        raise SalienceError("same_response=True explains A's response under B; response_b is given too. "
                            "Fix: pass one of them.")
    ra = response_a if response_a is not None else lm.generate(pa, generation)
    if same_response:
        rb = ra
    else:
        rb = response_b if response_b is not None else lm.generate(pb, generation)
    for name, r in (("response_a", ra), ("response_b", rb)):
        if isinstance(r, Generation) and not r.ids:
            raise SalienceError(f"The model generated an empty {name} (it ended its turn at once). "
                                f"Fix: pass {name}=... to compare, or change the prompt.")
    result_a = compute_span_result(lm, pa, ra, methods=(method,), config=config)
    result_b = compute_span_result(lm, pb, rb, methods=(method,), config=config)
    under_a = TokenLogprobs.from_result(result_a)
    p_a, p_b = result_a.n_prompt_tokens, result_b.n_prompt_tokens
    if np.array_equal(result_a.ids[p_a:], result_b.ids[p_b:]):
        under_b = TokenLogprobs.from_result(result_b)  # B explained the same tokens: its forward has them
    else:
        under_b = response_logprobs(lm, pb, ra)
    return compare_results(result_a, result_b, method=method, granularity=granularity, pattern=pattern,
                           cross=CrossLogprobs(under_a, under_b), labels=labels)
