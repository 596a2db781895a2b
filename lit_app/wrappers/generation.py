"""The generation model: prompt (+ optional system prompt) -> the model's greedy response."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


import sequence_salience as ss
from lit_app.schema import fields
from lit_app.errors import RequestError
from lit_app.schema.inputs import JsonDict
from lit_app.wrappers.wrapper import Wrapper


class GenerationModel(Wrapper):
    """Prompt (+ optional system prompt) -> the model's greedy response, of at most the input's own
    `max_new_tokens` (a shipped row's or a script's; absent: the default budget), capped by the server's
    --max_new_tokens (lit_app/model/responses.py `Responses.config_for`).

    No generation storm: LIT's data table asks for the response of every row when
    the page opens (one request with all rows). A request for more than one input
    answers from the caches only (memory, then disk) and leaves the other rows'
    responses empty; a single-input request (the selected datapoint) generates.
    """

    INPUT_SPEC = fields.GENERATION_INPUT_SPEC
    OUTPUT_SPEC = fields.GENERATION_OUTPUT_SPEC

    def predict(self, inputs: Iterable[JsonDict], **kw) -> list[JsonDict]:
        inputs = list(inputs)
        if len(inputs) <= 1:
            return super().predict(inputs, **kw)
        outputs = []
        for ex in inputs:
            try:
                gen = self._shared.cached_generation(self._shared.format_prompt(ex))
            except (RequestError, ss.SalienceError, ValueError, TypeError):
                gen = None  # a bad row: its own request will say why
            outputs.append(self._output(gen))
        return outputs

    @staticmethod
    def _output(gen: Any) -> JsonDict:
        if gen is None:
            return {fields.RESPONSE: "", fields.RESPONSE_TOKENS: []}
        return {
            fields.RESPONSE: gen.text,
            fields.RESPONSE_TOKENS: [gen.text[s:e] for s, e in gen.offsets],
        }

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        chat = self._shared.format_prompt(ex)
        return self._output(self._shared.generate(chat))

