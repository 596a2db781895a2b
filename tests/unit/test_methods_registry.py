"""The method registry is the single source of each method's facts: complete, consistent, JSON-able."""

from __future__ import annotations

import dataclasses
import json

import pytest

import sequence_salience as ss
from sequence_salience import methods
from sequence_salience.methods.base import COUNT_UNITS, SalienceConfig

JSON_FIELDS = {"name", "label", "short", "menu", "signed", "linear", "count_field", "count_unit", "default_count",
               "cost_unit", "trust", "kind", "granularities", "first_look", "budget", "exact_measured"}
CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SalienceConfig)}


@pytest.mark.parametrize("name", methods.list_methods())
def test_every_method_declares_its_facts(name):
    m = methods.get_method(name)
    assert m.name == name and name == name.lower() and " " not in name
    assert m.label and m.short and m.cost_unit and m.paper.startswith("https://")
    assert isinstance(m.signed, bool) and isinstance(m.linear, bool)
    assert m.title == m.label  # the former name stays readable
    if m.count_field is None:
        assert m.count_unit is None and m.default_count == 0 and not m.progress_counts
    else:
        assert m.count_unit in COUNT_UNITS and m.default_count > 0
        # The count is a SalienceConfig field, and its default is that field's default.
        assert CONFIG_DEFAULTS[m.count_field] == m.default_count
        assert m.count_in(SalienceConfig(**{m.count_field: 3})) == 3


def test_names_labels_and_count_fields_are_unique():
    entries = methods.registry_json()
    for key in ("name", "label", "short", "menu"):
        values = [e[key] for e in entries]
        assert len(set(values)) == len(values), key
    counted = [e["count_field"] for e in entries if e["count_field"] is not None]
    assert len(set(counted)) == len(counted)


def test_registry_json_round_trips_and_matches_the_records():
    entries = methods.registry_json()
    assert json.loads(json.dumps(entries)) == entries
    assert [e["name"] for e in entries] == ss.list_methods()
    for e in entries:
        assert set(e) == JSON_FIELDS
        m = methods.get_method(e["name"])
        # first_look, budget: a segment record's only; exact_measured: False for a token method
        assert e == {**{k: getattr(m, k, None) for k in JSON_FIELDS}, "exact_measured": False,
                     "menu": m.menu or m.label}
        # When to trust the map: a sentence of the record's own (the module's help shows it), not a placeholder.
        assert len(e["trust"]) > 40 and e["trust"].endswith("."), e


def test_the_method_select_names_a_method_by_its_label_or_its_records_shorter_menu_name():
    """SalienceMethod.menu: the module's method select is narrow (1280x720); a record whose label does not fit it
    names a shorter one (the browser test tests/e2e/test_method_help.py measures each), the others their label."""
    entries = {e["name"]: e for e in methods.registry_json(kinds=("token", "segment"))}
    assert entries["grad_norm"]["menu"] == entries["grad_norm"]["label"] == "Gradient norm"  # no menu: the label
    assert (entries["word_verified"]["menu"], entries["word_verified"]["label"]) == (
        "Words: best quarter", "Estimate, then leave one word out on the best quarter")
    assert all(len(e["menu"]) <= len(e["label"]) for e in entries.values()), entries


def test_a_segment_methods_first_look_is_a_registered_segment_method():
    """What a segment method reports first (SegmentMethod.first_look, the name its first partial values go by on the
    page) is another segment method of the registry: attention_verified's, the learned estimate it starts from."""
    looks = {name: methods.get_segment_method(name).first_look for name in methods.list_segment_methods()}
    assert looks["attention_verified"] == "attention_attribution"
    assert all(v is None or (v in looks and v != k) for k, v in looks.items()), looks
    segments = {e["name"]: e for e in methods.registry_json(kinds=("segment",))}
    assert {k: e["first_look"] for k, e in segments.items()} == looks


def test_known_counts_match_the_documented_contract():
    """Hand-checked against docs/architecture.md: IG counts 16 steps, SmoothGrad 8 samples."""
    by_name = {e["name"]: e for e in methods.registry_json()}
    assert (by_name["integrated_gradients"]["count_field"], by_name["integrated_gradients"]["count_unit"],
            by_name["integrated_gradients"]["default_count"]) == ("ig_steps", "steps", 16)
    assert (by_name["smooth_grad"]["count_field"], by_name["smooth_grad"]["count_unit"],
            by_name["smooth_grad"]["default_count"]) == ("smooth_grad_samples", "samples", 8)
    assert by_name["grad_x_input"]["signed"] and not by_name["grad_norm"]["signed"]
    assert set(methods.DEFAULT_METHODS) <= set(by_name)
