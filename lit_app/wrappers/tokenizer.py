"""The tokenizer model: prompt (+ target) -> the tokens the salience model explains (never waits for
the model: the shared model's tokenizer copy)."""

from __future__ import annotations


from lit_app.schema import fields
from lit_app.schema.inputs import JsonDict, text_field
from lit_app.wrappers.wrapper import Wrapper


class TokenizerModel(Wrapper):
    """Prompt (+ target) -> the tokens the salience model explains."""

    needs_model = False  # the tokenizer copy (SharedLM.tokens): answered while the model queue is full
    INPUT_SPEC = fields.TOKENIZER_INPUT_SPEC
    OUTPUT_SPEC = fields.TOKENIZER_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        chat = self._shared.format_prompt(ex)
        return {fields.TOKENS: self._shared.tokens(chat, text_field(ex, fields.TARGET))}

