"""The prompt side of every request: an example's model input and its tokens, without the model lock.

`PromptTokens` tokenizes with its own copy of the loaded model's tokenizer, under its own lock
(`lock`), so requests that only need tokens (the tokenizer model, and the first step of every other
request) do not wait while the model computes. A fast (Rust) tokenizer is not safe to use from
several threads at once ("Already borrowed"), so each tokenizer object is only ever used under its
own lock: the model's under the model lock, the copy under `lock`. A tokenizer that cannot be
copied falls back to the model's, under the model lock.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import threading

import sequence_salience as ss
from sequence_salience.salience import pair_tokens
from lit_app.schema import fields
from lit_app.errors import RequestError
from lit_app.schema.inputs import JsonDict, chat_field, rule_field, text_field
from sequence_salience.field_rules import MAX_NEW_TOKENS

logger = logging.getLogger(__name__)

# A lock used as `with lock:` (threading.Lock, or the model's lit_app.model.scheduler.ModelScheduler).
Lock = contextlib.AbstractContextManager


def tokenizer_twin(lm: ss.LanguageModel, model_lock: Lock) -> tuple[ss.LanguageModel, Lock]:
    """(a LanguageModel sharing `lm`'s weights with its own copy of the tokenizer, the lock that copy is
    used under); (lm, model_lock) when the tokenizer cannot be copied or `lm` is not a dataclass."""
    if not dataclasses.is_dataclass(lm) or getattr(lm, "tokenizer", None) is None:
        return lm, model_lock
    try:
        twin = dataclasses.replace(lm, tokenizer=copy.deepcopy(lm.tokenizer))
    except Exception as e:  # pylint: disable=broad-except
        logger.warning("Cannot copy the tokenizer (%s: %s); token-only requests wait for the model.",
                       type(e).__name__, e)
        return lm, model_lock
    return twin, threading.Lock()


@dataclasses.dataclass(frozen=True)
class RowPrompt(ss.ChatPrompt):
    """A formatted prompt with its row's own response budget: the input's `max_new_tokens` (a shipped
    row's, e.g. the chain-of-thought case's, or a script's), None when it has none. The one place the
    budget is read from a request; lit_app/model/responses.py `Responses.config_for` turns it into the
    GenerationConfig every path generates with (capped by the server's --max_new_tokens)."""

    max_new_tokens: int | None = None


def row_budget(ex: JsonDict) -> int | None:
    """The input's own `max_new_tokens` (1 to the rule's 1,024), None when absent or "".

    Raises:
      RequestError: not a whole number in the rule's range, naming the field.
    """
    value = ex.get(fields.MAX_NEW_TOKENS)
    if value is None or value == "":
        return None
    return int(rule_field(ex, MAX_NEW_TOKENS))


class PromptTokens:
    """Formats and tokenizes prompts with a copy of the model's tokenizer (module docstring)."""

    def __init__(self, lm: ss.LanguageModel, model_lock: Lock):
        """lm: the loaded model; model_lock: what its own tokenizer is used under (the fallback)."""
        self._lm, self.lock = tokenizer_twin(lm, model_lock)

    def format_prompt(self, ex: JsonDict) -> RowPrompt:
        """The model input of an input example: its `prompt`, `system` and `chat` fields, with its own
        response budget (`row_budget`).

        Raises:
          RequestError: the prompt is missing or blank; `max_new_tokens` is out of range.
        """
        prompt = text_field(ex, fields.PROMPT, required=True)
        if not prompt.strip():
            raise RequestError("The prompt is empty. Fix: type a prompt in the editor, then add it.")
        system = text_field(ex, fields.SYSTEM) or None
        budget = row_budget(ex)
        with self.lock:
            chat = self._lm.format_prompt(prompt, system=system, chat=chat_field(ex))
        return RowPrompt(chat.text, chat.role_spans, chat.templated, max_new_tokens=budget)

    def tokens(self, chat: ss.ChatPrompt, target: str) -> list[str]:
        """Display strings of the prompt (+ target) tokens, as the salience model shows them."""
        lm = self._lm
        with self.lock:
            prompt = lm.encode_prompt(chat)
            pieces = [(prompt.text, prompt.offsets, prompt.ids)]
            if target:
                tok = lm.tokenize(target, add_special_tokens=False)
                pieces.append((tok.text, tok.offsets, tok.ids))
            out = []
            for text, offsets, ids in pieces:
                for (s, e), i in zip(offsets, ids):
                    out.append(text[s:e] if e > s else lm.tokenizer.convert_ids_to_tokens(int(i)))
            return out

    def pair_tokens(self, chat: ss.ChatPrompt, target: str | ss.Generation) -> ss.SalienceResult:
        """The pair's tokens, offsets and roles as a result without salience (sequence_salience.salience
        `pair_tokens`): what a prompt's segments need, without the model or its lock."""
        with self.lock:
            return pair_tokens(self._lm, chat, target)
