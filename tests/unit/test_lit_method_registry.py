"""The method registry the LIT layer publishes (lit_app/schema/method_registry.py, docs/architecture.md "Method registry"):
the core registry plus the LIT facts, carried to the browser in the salience model's output spec."""

from __future__ import annotations

import json

import pytest
from lit_nlp.api import types as lit_types
from lit_nlp.lib import serialize

import sequence_salience as ss
from lit_app.schema import fields, inputs, method_registry

# The LIT facts as the browser and scripts have sent them since before the registry (wire values).
TOKEN = {"detail": None, "known_detail": None, "default_at": []}
# Segment methods: their values come from `detail="segments"` jobs; `default_at` the granularities at which
# the module shows the method once its forwards finish (method_registry.DEFAULT_SEGMENT_METHOD); `request_default_at`
# those at which its "measure" button runs it (method_registry.REQUEST_SEGMENT_METHOD; [] unless given); `known_detail`
# the request that reads how many of its segments an exact method measured already (an exact method's only).
KNOWN = {"known_detail": "segments_known"}
NOT_KNOWN = {"known_detail": None}
WIRE = {
    "grad_norm": {"max_count": None, "tag": None, "matrix_detail": None, **TOKEN},
    "grad_x_input": {"max_count": None, "tag": None, "matrix_detail": None, **TOKEN},
    "integrated_gradients": {"max_count": 256, "tag": "ig", "matrix_detail": "ig_matrix", **TOKEN},
    "smooth_grad": {"max_count": 256, "tag": "sg", "matrix_detail": "smooth_grad_matrix", **TOKEN},
    "leave_one_out": {**KNOWN, "max_count": None, "tag": None, "matrix_detail": None, "detail": "segments",
                      "default_at": ["sentence", "paragraph", "line", "role"]},
    "ablation_surrogate": {**NOT_KNOWN, "max_count": 256, "tag": None, "matrix_detail": None, "detail": "segments",
                           "default_at": []},
    "coarse_to_fine": {**NOT_KNOWN, "max_count": None, "tag": None, "matrix_detail": None, "detail": "segments",
                       "default_at": [], "request_default_at": ["token"]},
    "attention_attribution": {**NOT_KNOWN, "max_count": None, "tag": None, "matrix_detail": None, "detail": "segments",
                              "default_at": []},
    "attention_verified": {**KNOWN, "max_count": None, "tag": None, "matrix_detail": None, "detail": "segments",
                           "default_at": []},
    "word_verified": {**KNOWN, "max_count": None, "tag": None, "matrix_detail": None, "detail": "segments",
                      "default_at": [], "request_default_at": ["word"]},
}


def test_published_registry_is_the_core_registry_plus_the_wire_facts():
    published = method_registry.published_registry()
    core = ss.methods.registry_json(kinds=("token", "segment"))
    assert [e["name"] for e in published] == [e["name"] for e in core] == list(WIRE)
    for entry, core_entry in zip(published, core):
        first = [g for g, m in method_registry.FIRST_MAP_METHOD.items() if m == entry["name"]]
        assert entry == {**core_entry, "request_default_at": [], **WIRE[entry["name"]], "first_map_at": first}
    assert set(published[0]) == {"name", "label", "short", "menu", "signed", "linear", "count_field", "count_unit",
                                 "default_count", "max_count", "tag", "matrix_detail", "cost_unit", "trust", "kind",
                                 "granularities", "first_look", "budget", "exact_measured",
                                 "detail", "known_detail", "default_at", "request_default_at", "first_map_at"}
    by_name = {e["name"]: e for e in published}
    assert (by_name["integrated_gradients"]["count_field"], by_name["smooth_grad"]["count_field"]) == \
        (fields.IG_STEPS, fields.SMOOTH_GRAD_SAMPLES) == ("ig_steps", "smooth_grad_samples")
    assert json.loads(json.dumps(published)) == published


def test_the_first_map_published_per_granularity_is_the_rules_choice_on_the_shipped_figures():
    from sequence_salience import first_map

    assert method_registry.FIRST_MAP_METHOD == first_map.first_map_methods()
    published = method_registry.published_registry()
    for g, chosen in method_registry.FIRST_MAP_METHOD.items():
        named = [e["name"] for e in published if g in e["first_map_at"]]
        assert named == ([] if chosen is None else [chosen]), g  # none: the gradient stays the first map
        assert [e["name"] for e in published if g in e["default_at"]] == ["leave_one_out"]  # exact, confirming it


def test_the_wrappers_tables_follow_the_registry():
    assert [(e.method, e.field, e.kind, e.matrix_detail, e.unit, e.maximum) for e in method_registry.EXTRA_METHODS] \
        == [("integrated_gradients", "ig_steps", "ig", "ig_matrix", "steps", 256),
            ("smooth_grad", "smooth_grad_samples", "sg", "smooth_grad_matrix", "samples", 256)]
    assert inputs.DETAIL_MODES == ("", "span", "poll", "stream", "span_progress", "span_cancel", "matrix_cancel",
                                   "page_closed", "ig_matrix", "smooth_grad_matrix", "segments",
                                   "segments_known")
    for extra in method_registry.EXTRA_METHODS:
        spec = fields.SALIENCE_INPUT_SPEC[extra.field]
        assert isinstance(spec, lit_types.Integer)
        assert (spec.min_val, spec.max_val, spec.default) == (0, extra.maximum, 0)
    assert list(fields.SALIENCE_INPUT_SPEC) == ["prompt", "system", "chat", "target", "ig_steps", "smooth_grad_samples",
                                                "target_span", "detail", "span_job", "matrix_job", "stream_after", "target_mask",
                                                "segment_method", "granularity", "pattern", "removal", "surrogate_masks"]


def test_a_counted_method_without_lit_facts_is_refused_by_name():
    facts = dict(method_registry.LIT_FACTS)
    del facts["smooth_grad"]
    with pytest.raises(RuntimeError, match=r"without LIT facts \['smooth_grad'\].*Fix: give every"):
        method_registry.extra_methods(facts)
    stray = {**method_registry.LIT_FACTS, "grad_norm": method_registry.LitFacts("gn", "gn_matrix")}
    with pytest.raises(RuntimeError, match=r"without a count \['grad_norm'\]"):
        method_registry.extra_methods(stray)


def test_the_salience_output_spec_carries_the_registry_through_lits_serialization():
    spec = fields.SALIENCE_OUTPUT_SPEC[fields.METHOD_REGISTRY]
    sent = json.loads(serialize.to_json({"output": fields.SALIENCE_OUTPUT_SPEC}))["output"][fields.METHOD_REGISTRY]
    # LIT's client revives a spec entry by __name__ (it must be a type it knows) and copies `default`.
    assert sent["__class__"] == "LitType" and sent["__name__"] == "ListLitType" and sent["required"] is False
    assert sent["default"] == method_registry.published_registry()
    # LIT's Python side (e.g. its RemoteModel reading /get_info) revives it too.
    back = serialize.from_json(serialize.to_json({"output": fields.SALIENCE_OUTPUT_SPEC}))["output"]
    assert type(back[fields.METHOD_REGISTRY]) is type(spec) and back[fields.METHOD_REGISTRY].default == sent["default"]


def test_the_cli_shows_the_method_the_browser_module_shows_first():
    # Issue 19: the CLI's default was grad_x_input while the UI opens on gradient norm.
    from sequence_salience.cli.common import explain_default

    assert explain_default() == method_registry.published_registry()[0]["name"] == "grad_norm"
