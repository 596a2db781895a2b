"""LIT wrapper for "Compare an edit": the pinned datapoint's response under the selected datapoint's
prompt (sequence_salience.compare), over the shared model of lit_app/shared_model.py.

One hidden LIT model per loaded model, `_<name>_compare` (fields.compare_model_name). Its input is
the selected datapoint (prompt, system, chat) plus the pinned one's prompt, system and target
(`pinned_*`); its one output, `compare`, is `CrossLogprobs.to_dict()` of the pinned response (its
greedy generation when its target is empty, the ids as generated) under the pinned prompt ("under_a")
and under the selected prompt ("under_b"), plus "forwards": the model passes this answer ran. It is
one teacher-forced forward without gradients when the pinned datapoint's salience was shown before
(its log-probs are in the salience caches), else two. The browser's compare view
(frontend/src/compare/) asks for it when LIT's *Pin datapoint* (or the editor's *Add and compare*)
pins a datapoint and another is selected.
"""

from __future__ import annotations

from lit_nlp.api import types as lit_types

from lit_app import fields
from lit_app.errors import RequestError
from lit_app.inputs import JsonDict, text_field
from lit_app.wrapper import Wrapper


class CompareModel(Wrapper):
    """`_<name>_compare`: the pinned response's log p under the pinned and the selected prompt."""

    INPUT_SPEC = fields.COMPARE_INPUT_SPEC
    OUTPUT_SPEC = fields.COMPARE_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        chat_b = self._shared.format_prompt(ex)
        pinned_prompt = text_field(ex, fields.PINNED_PROMPT)
        if not pinned_prompt.strip():
            raise RequestError(f"{fields.PINNED_PROMPT} is empty. Fix: send the pinned datapoint's prompt "
                               "(pin a datapoint with LIT's Pin button first).")
        chat_a = self._shared.format_prompt({fields.PROMPT: pinned_prompt,
                                             fields.SYSTEM: text_field(ex, fields.PINNED_SYSTEM),
                                             fields.CHAT: ex.get(fields.CHAT)})
        cross, forwards = self._shared.cross_logprobs(chat_a, text_field(ex, fields.PINNED_TARGET), chat_b)
        return {fields.COMPARE: {**cross.to_dict(), "forwards": forwards}}
