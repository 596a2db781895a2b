"""Teacher-forced log-probabilities of a given response under a prompt: ONE forward pass, no backward.

"Did my edit move the model toward or away from the old answer?" is answered by the old answer's
log p under the new prompt next to its log p under the old one. The old one is already in the old
result (`SalienceResult.target_logprobs`, from the forward its salience ran); the new one costs
this one forward. The tokens are prepared exactly as compute_salience prepares them
(salience.prepare_pair: a Generation's ids are used as is), so the per-token values line up with a
result's `target_logprobs` token for token.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from sequence_salience.methods.gradients import target_logprobs
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.salience import build_inputs, prepare_pair
from sequence_salience.text import ChatPrompt


@dataclasses.dataclass(frozen=True)
class TokenLogprobs:
    """log p of each response token given the prompt and the response tokens before it.

    Attributes:
      response: the response text.
      ids: <int64>[T] token ids (two sides with equal ids line up token for token).
      tokens: T token strings (each token's own text; the tokenizer's piece for one with an empty span).
      logprobs: <float64>[T] log p(token_t | prompt, tokens before t).
    """

    response: str
    ids: np.ndarray
    tokens: tuple[str, ...]
    logprobs: np.ndarray

    @property
    def total(self) -> float:
        """log p of the whole response (the sum over its tokens)."""
        return float(np.sum(self.logprobs, dtype=np.float64))

    def to_dict(self) -> dict:
        return {"response": self.response, "ids": [int(i) for i in self.ids], "tokens": list(self.tokens),
                "logprobs": [float(v) for v in self.logprobs], "total": self.total}

    @classmethod
    def from_result(cls, result) -> "TokenLogprobs":
        """The response's log-probs a SalienceResult already holds (no model pass)."""
        p = result.n_prompt_tokens
        return cls(result.text[result.prompt_end:], np.asarray(result.ids[p:], dtype=np.int64), tuple(result.tokens[p:]),
                   np.asarray(result.target_logprobs, dtype=np.float64))


@dataclasses.dataclass(frozen=True)
class CrossLogprobs:
    """One response under two prompts (or two models): per token and in total.

    Attributes:
      under_a: its log-probs under A (for compare(): the prompt that produced it).
      under_b: its log-probs under B (for compare(): the edited prompt).
    """

    under_a: TokenLogprobs
    under_b: TokenLogprobs

    @property
    def delta(self) -> float:
        """log p under B − log p under A: > 0 means B makes the response more likely."""
        return self.under_b.total - self.under_a.total

    @property
    def per_token_delta(self) -> np.ndarray | None:
        """<float64>[T] per-token B − A, or None when the two sides tokenize the response differently."""
        if not np.array_equal(self.under_a.ids, self.under_b.ids):
            return None
        return self.under_b.logprobs - self.under_a.logprobs

    def to_dict(self) -> dict:
        per = self.per_token_delta
        return {"under_a": self.under_a.to_dict(), "under_b": self.under_b.to_dict(), "delta": self.delta,
                "per_token_delta": None if per is None else [float(v) for v in per]}


def response_logprobs(lm: LanguageModel, prompt: str | ChatPrompt, response: str | Generation) -> TokenLogprobs:
    """Teacher-forced log p of `response` after `prompt`, per token: one forward pass without gradients.

    Args:
      lm: the model.
      prompt: raw text or a ChatPrompt (lm.format_prompt), as for compute_salience.
      response: its text (tokenized after the prompt) or a Generation (its ids are used as is).

    Raises:
      SalienceError: empty prompt or response, or longer than the model's context.
    """
    pair = prepare_pair(lm, prompt, response)
    inputs = build_inputs(lm, [(pair.prompt.ids, pair.target_ids)])
    with torch.no_grad():
        logp = target_logprobs(inputs, inputs.embeds)[0]  # [T]
    text = pair.target_text
    tokens = tuple(text[s:e] if e > s else lm.tokenizer.convert_ids_to_tokens(int(i))
                   for (s, e), i in zip(pair.target_offsets, pair.target_ids))
    return TokenLogprobs(text, np.asarray(pair.target_ids, dtype=np.int64), tokens, logp.double().cpu().numpy())
