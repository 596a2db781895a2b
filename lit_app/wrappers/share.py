"""LIT wrapper for "Share this view": the standalone HTML page of what the salience module shows
(sequence_salience/display/share.py, the CLI's `--share`), over the shared model of lit_app/model/shared_model.py.

One hidden LIT model per loaded model, `_<name>_share` (fields.share_model_name). Its input is the datapoint
(prompt, system, target, chat), the extra methods' counts (as the salience model's), the token method shown
(`share_method`), its granularity and pattern, and the target span ("t0:t1"; empty: the whole response). Its one
output, `share`, is {"html": the page}: the model, prompt, answer, method, granularity, the map, the answer x
prompt matrix with a number in every cell, and a notebook cell that recomputes it. The result is the one the
module's per-token matrices came from (`SharedLM.cached_salience`); when it is not in memory it is computed
as the salience model's blocking request does (background work of the scheduler).
"""

from __future__ import annotations

import sequence_salience as ss
from sequence_salience import methods as core_methods
from sequence_salience.display import share
from lit_app.errors import RequestError
from lit_app.schema import fields
from lit_app.schema.inputs import JsonDict, extra_counts, parse_target_span, text_field
from lit_app.wrappers.wrapper import Wrapper


class ShareModel(Wrapper):
    """`_<name>_share`: the standalone page of one view."""

    INPUT_SPEC = fields.SHARE_INPUT_SPEC
    OUTPUT_SPEC = fields.SHARE_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        method = text_field(ex, fields.SHARE_METHOD)
        if core_methods.is_segment_method(method):
            raise RequestError(f"{fields.SHARE_METHOD} {method!r} is a segment method; the shared page holds a token "
                               "method's map and matrix. Fix: share the view of a gradient method (choose one "
                               f"of {', '.join(core_methods.list_methods())}).")
        if method and method not in core_methods.list_methods():
            raise RequestError(f"{fields.SHARE_METHOD} {method!r} is not a method. Fix: use one of "
                               f"{', '.join(core_methods.list_methods())}.")
        chat = self._shared.format_prompt(ex)
        target = text_field(ex, fields.TARGET)
        counts = extra_counts(ex)
        result = self._shared.cached_salience(chat, target, counts) or self._shared.salience(chat, target, counts)
        if method and method not in result.matrices:
            raise RequestError(f"{fields.SHARE_METHOD} {method!r} has no matrix in this result (it has "
                               f"{', '.join(result.matrices)}). Fix: send the method shown, with its count field "
                               "(the registry's count_field) as the salience model's request does.")
        n_targets = len(result.tokens) - int(result.n_prompt_tokens)
        span = parse_target_span(ex.get(fields.TARGET_SPAN), n_targets)
        try:
            page = share.share_html(result, method or None, text_field(ex, fields.GRANULARITY) or "word", span,
                                    model=self._shared.name, pattern=text_field(ex, fields.PATTERN) or None)
        except ss.SalienceError as e:
            raise RequestError(str(e)) from e
        return {fields.SHARE: {"html": page}}
