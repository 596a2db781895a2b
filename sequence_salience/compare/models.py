"""Two models, one prompt: both responses, both prompt salience maps on one shared scale per aligned
segment, the difference, and each model's log p of the other model's answer (teacher-forced).

`compare_models(lm_a, lm_b, prompt)` reuses the prompt comparison's pieces (compare.py
`compare_results`: alignment, shared scale, difference; comparison.py: the class and its rendering): each
model formats the prompt with its own chat template (the alignment keeps chat markup whole and out of the values),
generates (unless responses are given) and explains its whole response; then each answer is scored
under the other model by one teacher-forced forward. When the two tokenizers have the same vocabulary
the other model reads the answer's token ids as generated; otherwise it tokenizes the answer's text
itself (then the per-token rows do not line up and only the totals compare).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from sequence_salience.compare.compare import DEFAULT_METHOD, compare_results
from sequence_salience.compare.comparison import SalienceComparison, render_fragment
from sequence_salience.compare.cross import CrossLogprobs, TokenLogprobs, response_logprobs
from sequence_salience.display.markup import esc
from sequence_salience.errors import SalienceError
from sequence_salience.files import atomic_write_json, atomic_write_text
from sequence_salience.methods import get_method
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.model import Generation, GenerationConfig, LanguageModel
from sequence_salience.salience import compute_span_result
from sequence_salience.text import ChatPrompt

FORMAT = "sequence_salience.ModelComparison"


@dataclasses.dataclass(frozen=True)
class ModelComparison:
    """Two models on one prompt.

    Attributes:
      comparison: the SalienceComparison of model A's result and model B's (labels: the model names);
        its `cross` is A's answer under model A and under model B.
      cross_b: B's answer under model A (`under_a`) and under model B (`under_b`).
      same_tokenizer: whether the two tokenizers have the same vocabulary (answers crossed as token ids).
    """

    comparison: SalienceComparison
    cross_b: CrossLogprobs
    same_tokenizer: bool

    @property
    def cross_a(self) -> CrossLogprobs:
        """A's answer under model A (`under_a`) and under model B (`under_b`)."""
        assert self.comparison.cross is not None
        return self.comparison.cross

    @property
    def labels(self) -> tuple[str, str]:
        return self.comparison.labels

    def to_dict(self, with_results: bool = True) -> dict:
        out = self.comparison.to_dict(with_results=with_results)
        out.update(format=FORMAT, cross_a=self.cross_a.to_dict(), cross_b=self.cross_b.to_dict(),
                   same_tokenizer=self.same_tokenizer)
        return out

    def to_json(self, path, meta: Mapping[str, Any] | None = None) -> str:
        """Writes to_dict() (plus optional meta) as one JSON file, atomically; returns the path."""
        return atomic_write_json(path, {**self.to_dict(), "meta": dict(meta or {})})

    def cross_html(self) -> str:
        """Each answer's log p under both models, in total."""
        la, lb = self.labels
        rows = []
        for owner, c in ((la, self.cross_a), (lb, self.cross_b)):
            rows.append(f"<tr><td>{esc(owner)}'s answer</td><td>{c.under_a.total:.3f}</td>"
                        f"<td>{c.under_b.total:.3f}</td><td>{c.delta:+.3f}</td></tr>")
        return (f'<div class="ss-label">Each answer under both models (teacher-forced log p)</div>'
                f'<table class="ss-logp ss-cross-models"><tr><th></th><th>under {esc(la)}</th>'
                f'<th>under {esc(lb)}</th><th>Δ ({esc(lb)} − {esc(la)})</th></tr>'
                f'{"".join(rows)}</table>')

    def html(self, document: bool = True, title: str | None = None) -> str:
        """The prompt comparison's views (responses diff-marked, both maps on one scale, difference) with
        the two-way log p table."""
        bare = dataclasses.replace(self.comparison, cross=None)  # its "old answer" line is the prompt-edit wording
        fragment = render_fragment(bare, title)
        head_end = fragment.index('<div class="ss-label">')
        fragment = fragment[:head_end] + self.cross_html() + fragment[head_end:]
        if not document:
            return fragment
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{esc(title or 'Sequence Salience: compare models')}</title></head>\n"
                f"<body style=\"margin:16px\">{fragment}</body></html>\n")

    def _repr_html_(self) -> str:
        return self.html(document=False)

    def to_html(self, path, title: str | None = None) -> str:
        atomic_write_text(path, self.html(document=True, title=title))
        return os.fspath(path)


def same_vocabulary(lm_a: LanguageModel, lm_b: LanguageModel) -> bool:
    """Whether two models' tokenizers map the same strings to the same ids."""
    if lm_a.tokenizer is lm_b.tokenizer:
        return True
    return lm_a.tokenizer.get_vocab() == lm_b.tokenizer.get_vocab()


def _crossed(answer: Generation | str, same: bool) -> Generation | str:
    return answer if same or isinstance(answer, str) else answer.text


def compare_models(
    lm_a: LanguageModel,
    lm_b: LanguageModel,
    prompt: str,
    *,
    method: str = DEFAULT_METHOD,
    granularity: str = "word",
    pattern: str | None = None,
    response_a: str | Generation | None = None,
    response_b: str | Generation | None = None,
    system: str | None = None,
    chat: bool | None = None,
    generation: GenerationConfig = GenerationConfig(),
    config: SalienceConfig = SalienceConfig(),
    labels: tuple[str, str] | None = None,
) -> ModelComparison:
    """How two models read one prompt: their answers, salience on one scale, and each other's answer's log p.

    Args:
      lm_a, lm_b: two loaded models (any two: sizes, base/instruct, a fine-tune; tokenizers may differ).
      prompt: the user text, formatted by each model's own chat template (see `chat`).
      method, granularity, pattern: as for `compare`.
      response_a, response_b: the responses to explain; None: each model's greedy generation.
      system, chat: as LanguageModel.format_prompt.
      labels: names of the two sides (default: the models' names; "A"/"B" when they are equal).

    Cost: the generations (unless given), one salience computation per model (one forward + backward for
    the gradient methods) and one forward without gradients per model for the other model's answer.
    """
    get_method(method)
    if not isinstance(prompt, str) or not prompt.strip():
        raise SalienceError("The prompt is empty. Fix: pass the prompt both models answer.")
    if labels is None:
        na, nb = str(getattr(lm_a, "name", "A")), str(getattr(lm_b, "name", "B"))
        labels = (na, nb) if na != nb else ("A", "B")
    pa: ChatPrompt = lm_a.format_prompt(prompt, system=system, chat=chat)
    pb: ChatPrompt = lm_b.format_prompt(prompt, system=system, chat=chat)
    ra = response_a if response_a is not None else lm_a.generate(pa, generation)
    rb = response_b if response_b is not None else lm_b.generate(pb, generation)
    for name, label, r in (("response_a", labels[0], ra), ("response_b", labels[1], rb)):
        if isinstance(r, Generation) and not r.ids:
            raise SalienceError(f"Model {label} generated an empty answer (it ended its turn at once). "
                                f"Fix: pass {name}=... to compare, or change the prompt.")
    result_a = compute_span_result(lm_a, pa, ra, methods=(method,), config=config)
    result_b = compute_span_result(lm_b, pb, rb, methods=(method,), config=config)
    same = same_vocabulary(lm_a, lm_b)
    cross_a = CrossLogprobs(TokenLogprobs.from_result(result_a), response_logprobs(lm_b, pb, _crossed(ra, same)))
    cross_b = CrossLogprobs(response_logprobs(lm_a, pa, _crossed(rb, same)), TokenLogprobs.from_result(result_b))
    comparison = compare_results(result_a, result_b, method=method, granularity=granularity, pattern=pattern,
                                 cross=cross_a, labels=labels)
    return ModelComparison(comparison=comparison, cross_b=cross_b, same_tokenizer=same)
