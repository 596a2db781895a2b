"""LIT wrapper for "Share this view": the standalone HTML page of what the salience module shows
(sequence_salience/display/share.py, the CLI's `--share`), over the shared model of lit_app/model/shared_model.py.

One hidden LIT model per loaded model, `_<name>_share` (fields.share_model_name). Its input is the datapoint
(prompt, system, target, chat), the method shown (`share_method`: a token or a segment method), its granularity and
pattern, the target span ("t0:t1"; empty: the whole response), the counts (the extra methods' as the salience model's;
a segment method's with its removal, as its segment request), and optionally `faithfulness`: the explanation test's
curves payload of the same target (lit_app/wrappers/explain.py, as the browser holds it). Its one output, `share`, is
{"html": the page}: the model, prompt, answer, method, granularity, the map, the answer x prompt matrix with a number
in every cell (a segment method's: its one row), the faithfulness table when sent, and a notebook cell that
recomputes it.

The values are the ones on screen: a token method's come from the result the module's per-token matrices came from
(`SharedLM.cached_salience`), a segment method's from its cached values (`SharedLM.segment_salience`, keyed by the
same request as the module's); when not in memory they are computed as the salience model's blocking request does
(background work of the scheduler).
"""

from __future__ import annotations

from collections.abc import Mapping

import sequence_salience as ss
from sequence_salience import methods as core_methods
from sequence_salience.display import share
from lit_app.errors import RequestError
from lit_app.schema import fields
from lit_app.schema.inputs import JsonDict, extra_counts, parse_target_span, segment_request, text_field
from lit_app.wrappers.wrapper import Wrapper, refused


class ShareModel(Wrapper):
    """`_<name>_share`: the standalone page of one view."""

    INPUT_SPEC = fields.SHARE_INPUT_SPEC
    OUTPUT_SPEC = fields.SHARE_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        method = text_field(ex, fields.SHARE_METHOD)
        names = core_methods.list_methods() + core_methods.list_segment_methods()
        if method and method not in names:
            raise RequestError(f"{fields.SHARE_METHOD} {method!r} is not a method. Fix: use one of {', '.join(names)}.")
        faithfulness = ex.get(fields.FAITHFULNESS) or None
        if faithfulness is not None and not isinstance(faithfulness, Mapping):
            raise RequestError(f'Input field "{fields.FAITHFULNESS}" is a {type(faithfulness).__name__}. Fix: send the '
                               'explanation test\'s curves payload (an object with "table"), or leave it out.')
        if core_methods.is_segment_method(method):
            return {fields.SHARE: {"html": self._segment_page(ex, method, faithfulness)}}
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
        return {fields.SHARE: {"html": self._page(result, method or None, text_field(ex, fields.GRANULARITY) or "word",
                                                  span, pattern=text_field(ex, fields.PATTERN) or None,
                                                  faithfulness=faithfulness)}}

    def _segment_page(self, ex: JsonDict, method: str, faithfulness: Mapping | None) -> str:
        """The page of a segment method's values: the request the module made for them (inputs.segment_request, the
        method named by `share_method`), answered from the cache, or measured now."""
        request = segment_request({**ex, fields.SEGMENT_METHOD: method})
        chat = self._shared.format_prompt(ex)
        try:
            values = self._shared.segment_salience(chat, text_field(ex, fields.TARGET), request)
        except ss.SalienceError as e:
            raise refused(str(e), e) from e
        return self._page(values, method, request.granularity, None, pattern=request.pattern,
                          faithfulness=faithfulness, ablation=self._shared.segment_config(request))

    def _page(self, result, method, granularity, span, **options) -> str:
        try:
            return share.share_html(result, method, granularity, span, model=self._shared.source, **options)
        except ss.SalienceError as e:
            raise RequestError(str(e)) from e
