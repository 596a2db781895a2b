"""Each number's rule is declared once (sequence_salience/field_rules.py), and every edge agrees with it:
the config default, the CLI flag (default, range, argparse refusal naming the flag), the LIT spec, the
LIT parser (lit_app/schema/inputs.py) and the HTTP limit (lit_app/edge/limits.py), and the published registry."""

from __future__ import annotations

import math

import pytest

from sequence_salience import field_rules
from sequence_salience.cli import build_parser
from sequence_salience.explain.faithfulness import FaithfulnessConfig
from sequence_salience.field_rules import FieldError
from sequence_salience.methods import AblationConfig, SalienceConfig, get_any_method
from sequence_salience.model import GenerationConfig
from lit_app import errors
from lit_app.wrappers import explain
from lit_app.schema import fields, inputs, method_registry
from lit_app.edge import limits

# (default, lo, hi) written out by hand: the one declaration must say this.
EXPECTED = {
    "ig_steps": (16, 1, 256),
    "smooth_grad_samples": (8, 1, 256),
    "surrogate_masks": (32, 1, 256),
    "max_new_tokens": (64, 1, 1024),
    "steps": (10, 1, 50),
    "ig_tolerance": (0.05, 0.0, 1.0),
}
# Where each rule's default lives in a config of the core library.
CONFIG_DEFAULTS = {
    "ig_steps": SalienceConfig().ig_steps,
    "smooth_grad_samples": SalienceConfig().smooth_grad_samples,
    "surrogate_masks": AblationConfig().surrogate_masks,
    "max_new_tokens": GenerationConfig().max_new_tokens,
    "steps": FaithfulnessConfig().steps,
    "ig_tolerance": explain.IG_AUTO_TOLERANCE,
}
# The CLI subcommand that has the flag (ig_tolerance has none: the browser's "IG steps" test only).
CLI = {"ig_steps": ["explain", "--prompt", "x"], "smooth_grad_samples": ["explain", "--prompt", "x"],
       "surrogate_masks": ["explain", "--prompt", "x"], "max_new_tokens": ["compare", "--prompt-a", "a"],
       "steps": ["evaluate", "--batch", "b.jsonl", "--out", "o"]}
# The LIT model input spec that holds the field, and whether 0 there means "off" (a counted token method).
LIT_SPECS = {"ig_steps": (fields.SALIENCE_INPUT_SPEC, True),
             "smooth_grad_samples": (fields.SALIENCE_INPUT_SPEC, True),
             "surrogate_masks": (fields.SALIENCE_INPUT_SPEC, False), "steps": (explain.INPUT_SPEC, False),
             "ig_tolerance": (explain.INPUT_SPEC, False)}
RULES = list(field_rules.RULES.values())
IDS = [r.name for r in RULES]


def test_every_rule_is_listed_with_its_hand_written_bounds():
    assert {name: (r.default, r.lo, r.hi) for name, r in field_rules.RULES.items()} == EXPECTED
    assert set(CONFIG_DEFAULTS) == set(EXPECTED)


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_config_defaults_are_the_rules(rule):
    assert CONFIG_DEFAULTS[rule.name] == rule.default


def test_counted_methods_carry_their_rule_and_publish_its_maximum():
    published = {m["name"]: m for m in method_registry.published_registry()}
    for name, m in published.items():
        rule = get_any_method(name).count
        if rule is None:
            assert m["count_field"] is None and m["max_count"] is None and m["default_count"] == 0
        else:
            assert (m["count_field"], m["default_count"], m["max_count"]) == (rule.name, rule.default, rule.hi)
            assert EXPECTED[rule.name][0] == rule.default


@pytest.mark.parametrize("name", sorted(CLI), ids=sorted(CLI))
def test_cli_flag_default_range_and_refusal(name, capsys):
    rule = field_rules.RULES[name]
    default, lo, hi = EXPECTED[name]
    parser = build_parser()
    dest = rule.cli_flag[2:].replace("-", "_")
    assert getattr(parser.parse_args(CLI[name]), dest) == default
    assert getattr(parser.parse_args([*CLI[name], rule.cli_flag, str(hi)]), dest) == hi
    assert getattr(parser.parse_args([*CLI[name], rule.cli_flag, str(lo)]), dest) == lo
    for bad in (str(lo - 1), str(hi + 1), "2.5", "x"):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args([*CLI[name], rule.cli_flag, bad])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {rule.cli_flag}: {bad!r}; use a whole number from {lo} to {hi}" in err, err


def test_smooth_grad_has_its_own_flag_in_explain_and_compare():
    parser = build_parser()
    assert parser.parse_args(["explain", "--prompt", "x", "--smooth-grad-samples", "3"]).smooth_grad_samples == 3
    assert parser.parse_args(["compare", "--prompt-a", "a", "--smooth-grad-samples", "5"]).smooth_grad_samples == 5


@pytest.mark.parametrize("name", sorted(LIT_SPECS), ids=sorted(LIT_SPECS))
def test_lit_spec_is_the_rule(name):
    spec, off = LIT_SPECS[name]
    default, lo, hi = EXPECTED[name]
    field = spec[name]
    assert (field.min_val, field.max_val) == ((0 if off else lo), hi)
    if name == "ig_steps":
        assert explain.INPUT_SPEC[name].default == 64 and explain.INPUT_SPEC[name].min_val == 1  # ig_auto's cap
    assert field.default == (0 if off else default)


@pytest.mark.parametrize("name", sorted(LIT_SPECS), ids=sorted(LIT_SPECS))
def test_parser_and_limit_accept_the_range_and_refuse_beyond_it_naming_the_field(name):
    spec, off = LIT_SPECS[name]
    default, lo, hi = EXPECTED[name]
    rule = field_rules.RULES[name]
    assert inputs.rule_field({}, rule, off=off) == (0 if off else default)
    assert inputs.rule_field({name: hi}, rule, off=off) == hi
    limits.validate_example({name: hi}, limits.Limits(), "inputs[0]")
    too_big = hi + 1
    with pytest.raises(errors.RequestError) as parsed:
        inputs.rule_field({name: too_big}, rule, off=off)
    with pytest.raises(errors.Rejected) as rejected:
        limits.validate_example({name: too_big}, limits.Limits(), "inputs[0]")
    assert rejected.value.status == 400
    for message in (str(parsed.value), rejected.value.message):
        assert f'"{name}"' in message and f"{hi:g}" in message and "\n" not in message


def test_limit_names_the_server_flag_when_it_lowers_the_maximum():
    with pytest.raises(errors.Rejected) as rejected:
        limits.validate_example({fields.IG_STEPS: 9}, limits.Limits(max_ig_steps=8), "inputs[0]")
    assert "from 0 (off) to 8 (--max_ig_steps)" in rejected.value.message


@pytest.mark.parametrize("rule, value, expected", [
    pytest.param(field_rules.IG_STEPS, "3", 3, id="text"),
    pytest.param(field_rules.IG_STEPS, 3.0, 3, id="whole-float"),
    pytest.param(field_rules.IG_TOLERANCE, "0.5", 0.5, id="float-text"),
    pytest.param(field_rules.IG_TOLERANCE, 1, 1.0, id="float-top"),
])
def test_parse_reads_numbers_and_their_text(rule, value, expected):
    assert rule.parse(value) == expected


@pytest.mark.parametrize("rule, value", [
    pytest.param(field_rules.IG_STEPS, 2.5, id="fraction"),
    pytest.param(field_rules.IG_STEPS, True, id="bool"),
    pytest.param(field_rules.IG_STEPS, 0, id="zero-not-off"),
    pytest.param(field_rules.IG_STEPS, None, id="none"),
    pytest.param(field_rules.IG_TOLERANCE, 0, id="open-low-end"),
    pytest.param(field_rules.IG_TOLERANCE, math.nan, id="nan"),
    pytest.param(field_rules.IG_TOLERANCE, "inf", id="inf"),
])
def test_parse_refuses_with_the_allowed_range(rule, value):
    with pytest.raises(FieldError, match="; use a "):
        rule.parse(value)


def test_off_accepts_zero_and_a_lower_server_maximum():
    assert field_rules.IG_STEPS.parse(0, off=True) == 0
    with pytest.raises(FieldError, match=r"from 0 \(off\) to 8"):
        field_rules.IG_STEPS.parse(9, hi=8, off=True)
    assert field_rules.IG_TOLERANCE.allowed() == "a number above 0 and at most 1"
