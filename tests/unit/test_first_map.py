"""The first-map rule (sequence_salience/first_map.py): which method a user sees first per granularity, from
hand-made agreement figures and costs, and the shipped figures file's schema."""

from __future__ import annotations

import json

import pytest

from sequence_salience import first_map
from sequence_salience.errors import SalienceError
from sequence_salience.first_map import Agreement, AgreementBar, choose_first_maps

LOO, GRAD, FAST, SLOW = "leave_one_out", "grad_norm", "fast", "slow"
# Forwards at a typical prompt: the fast estimate 1, another estimate 5, leave-one-out 21.
COSTS = {LOO: 21.0, FAST: 1.0, SLOW: 5.0}
GOOD = Agreement(n=100, spearman=0.7, top1=0.85, top3=0.7)
GRADIENT = Agreement(n=100, spearman=0.3, top1=0.5, top3=0.6)


def choose(figures, costs=COSTS, **kw):
    return choose_first_maps(figures, costs, reference=LOO, gradient=GRAD, granularities=("sentence",), **kw)


@pytest.mark.parametrize(("fast", "expected"), [
    pytest.param(GOOD, FAST, id="passes"),
    pytest.param(Agreement(n=100, spearman=0.7, top1=0.79, top3=0.7), None, id="top1-below-0.8"),
    pytest.param(Agreement(n=100, spearman=0.7, top1=0.85, top3=0.66), None, id="top3-below-two-of-three"),
    pytest.param(Agreement(n=49, spearman=0.7, top1=0.85, top3=0.7), None, id="too-few-prompts"),
    pytest.param(Agreement(n=100, spearman=0.29, top1=0.85, top3=0.7), None, id="worse-rank-correlation-than-gradient"),
    pytest.param(Agreement(n=50, spearman=0.3, top1=0.8, top3=2 / 3), FAST, id="exactly-at-the-bar"),
])
def test_a_fast_method_is_the_first_map_only_when_it_clears_the_bar(fast, expected):
    assert choose({"sentence": {FAST: fast, GRAD: GRADIENT}}) == {"sentence": expected}


def test_a_method_must_also_beat_the_gradient_it_would_replace():
    strong_gradient = Agreement(n=100, spearman=0.3, top1=0.9, top3=0.6)  # top-1 above GOOD's 0.85
    assert choose({"sentence": {FAST: GOOD, GRAD: strong_gradient}}) == {"sentence": None}
    assert choose({"sentence": {FAST: GOOD, GRAD: strong_gradient}},
                  bar=AgreementBar(beat_gradient=False)) == {"sentence": FAST}
    assert choose({"sentence": {FAST: GOOD}}) == {"sentence": FAST}  # gradient not measured: the absolute bar only


def test_the_fastest_passing_method_wins_and_equal_costs_keep_the_costs_order():
    better_but_slower = Agreement(n=100, spearman=0.9, top1=0.95, top3=0.9)
    figures = {"sentence": {SLOW: better_but_slower, FAST: GOOD, GRAD: GRADIENT}}
    assert choose(figures) == {"sentence": FAST}
    assert choose(figures, costs={LOO: 21.0, SLOW: 1.0, FAST: 1.0}) == {"sentence": SLOW}
    assert choose(figures, costs={LOO: 21.0, FAST: 1.0, SLOW: 1.0}) == {"sentence": FAST}
    # The fast one fails: the slower passing one is the first map.
    figures["sentence"][FAST] = Agreement(n=100, spearman=0.7, top1=0.6, top3=0.7)
    assert choose(figures) == {"sentence": SLOW}


def test_the_reference_the_gradient_and_methods_no_cheaper_than_the_reference_are_never_chosen():
    perfect = Agreement(n=100, spearman=1.0, top1=1.0, top3=1.0)
    assert choose({"sentence": {LOO: perfect, GRAD: GRADIENT}}) == {"sentence": None}
    assert choose({"sentence": {GRAD: perfect}}, costs={LOO: 21.0, GRAD: 0.5}) == {"sentence": None}
    assert choose({"sentence": {SLOW: perfect}}, costs={LOO: 21.0, SLOW: 21.0}) == {"sentence": None}
    assert choose({"sentence": {"unknown_cost": perfect}}) == {"sentence": None}


def test_each_granularity_is_decided_on_its_own_figures_and_one_without_figures_keeps_the_gradient():
    weak = Agreement(n=100, spearman=0.7, top1=0.6, top3=0.7)
    figures = {"sentence": {FAST: weak, GRAD: GRADIENT}, "paragraph": {FAST: GOOD, GRAD: GRADIENT},
               "word": {FAST: GOOD}}
    assert choose_first_maps(figures, COSTS, reference=LOO, gradient=GRAD) == \
        {"sentence": None, "line": None, "paragraph": FAST, "role": None}  # word is not a first-map granularity


@pytest.mark.parametrize(("look", "expected"), [
    pytest.param(Agreement(n=51, spearman=0.31, top1=0.5, top3=0.6), SLOW, id="equal-or-better-on-every-figure"),
    pytest.param(Agreement(n=51, spearman=0.9, top1=0.9, top3=0.59), None, id="top3-below-the-gradient"),
    pytest.param(Agreement(n=51, spearman=0.9, top1=0.49, top3=0.9), None, id="top1-below-the-gradient"),
    pytest.param(Agreement(n=51, spearman=0.29, top1=0.9, top3=0.9), None, id="spearman-below-the-gradient"),
    # Below the bar's absolute rates (top-1 0.8, top-3 2/3) but no worse than the gradient: shown, as the estimate.
    pytest.param(Agreement(n=51, spearman=0.3, top1=0.6, top3=0.61), SLOW, id="below-the-bar-above-the-gradient"),
])
def test_a_first_look_replaces_the_gradient_only_where_it_is_no_worse_on_every_figure(look, expected):
    figures = {"sentence": {FAST: GOOD, SLOW: look, GRAD: GRADIENT}}
    assert first_map.choose_first_looks(figures, {"sentence": FAST}, {FAST: SLOW}, gradient=GRAD) == {"sentence": expected}


def test_no_first_look_without_a_first_map_a_record_that_has_one_or_figures_of_it():
    figures = {"sentence": {FAST: GOOD, SLOW: GOOD, GRAD: GRADIENT}}
    assert first_map.choose_first_looks(figures, {"sentence": None}, {}, gradient=GRAD) == {"sentence": None}
    assert first_map.choose_first_looks(figures, {"sentence": FAST}, {FAST: None}, gradient=GRAD) == {"sentence": None}
    assert first_map.choose_first_looks({"sentence": {FAST: GOOD, GRAD: GRADIENT}}, {"sentence": FAST}, {FAST: SLOW},
                                        gradient=GRAD) == {"sentence": None}


def test_the_shipped_figures_parse_and_name_registry_methods():
    shipped = first_map.load_agreement()
    assert shipped.source
    costs = first_map.method_costs()
    for g, methods in shipped.granularities.items():
        assert g in first_map.FIRST_MAP_GRANULARITIES, g
        for name, fig in methods.items():
            assert name in costs or name == GRAD, name
            assert 0 <= fig.top1 <= 1 and 0 <= fig.top3 <= 1 and fig.n >= 1
    chosen = first_map.first_map_methods()
    assert set(chosen) == set(first_map.FIRST_MAP_GRANULARITIES)
    assert all(m is None or m in costs for m in chosen.values())


def test_the_costs_come_from_the_method_records():
    # One forward for the attention estimate; one per segment (20) for leave-one-out; one per mask (32) for the
    # surrogate; each plus the unedited prompt.
    costs = first_map.method_costs(20)
    assert costs["attention_attribution"] == 1 and costs["leave_one_out"] == 21
    assert costs["ablation_surrogate"] == 33


@pytest.mark.parametrize(("data", "match"), [
    pytest.param([], 'no string "source"', id="not-an-object"),
    pytest.param({"source": "x", "granularities": {"sentence": {"m": {"n": 3, "top1": 0.5, "top3": 0.5}}}},
                 "exactly n, spearman, top1, top3", id="missing-key"),
    pytest.param({"source": "x", "granularities": {"sentence": {"m": {"n": 0, "spearman": 0, "top1": 0, "top3": 0}}}},
                 "positive integer", id="no-prompts"),
    pytest.param({"source": "x", "granularities": {"sentence": {"m": {"n": 3, "spearman": 0, "top1": 1.5, "top3": 0}}}},
                 "out of range", id="rate-above-one"),
])
def test_a_malformed_file_is_refused_with_the_entry_and_the_fix(tmp_path, data, match):
    path = tmp_path / "agreement.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SalienceError, match=match) as e:
        first_map.load_agreement(path)
    assert "Fix:" in str(e.value) and str(path) in str(e.value)
