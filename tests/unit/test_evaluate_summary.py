"""evaluate.summary: statistics over evaluated rows against hand-computed values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sequence_salience import SalienceError
from sequence_salience.evaluate import SummaryConfig, summarize, table
from sequence_salience.evaluate.summary import bootstrap_ci, mean_curve, pairs_table, summary_lines, win_rate

MODES = ("deletion", "insertion")


def fake_row(gaps: dict, aopc: dict, n_removed=(0, 1, 2), logprobs=None, original=-1.0, empty=-3.0) -> dict:
    """A RowEvaluation with the given gaps {mode: {method: {baseline: g}}} and AOPCs {mode: {name: a}}."""
    logprobs = logprobs or {}
    curves = {mode: {name: {"aopc": a, "logprobs": logprobs.get((mode, name), [original] * len(n_removed))}
                     for name, a in by_name.items()} for mode, by_name in aopc.items()}
    baselines = list(next(iter(next(iter(gaps.values())).values())))
    return {"gaps": gaps, "curves": curves, "baselines": baselines, "n_removed": list(n_removed),
            "original_logprob": original, "empty_logprob": empty, "n_segments": n_removed[-1]}


def rows_from(gn_random: list[float], gn_length: list[float], gx_random: list[float], gx_length: list[float]):
    rows = []
    for a, b, c, d in zip(gn_random, gn_length, gx_random, gx_length):
        g = {"grad_norm": {"random": a, "length": b}, "grad_x_input": {"random": c, "length": d}}
        aopc = {"grad_norm": 1.0, "grad_x_input": 0.5, "random": 0.25, "length": 0.75}
        rows.append(fake_row({mode: g for mode in MODES}, {mode: aopc for mode in MODES}))
    return rows


def test_mean_gap_and_win_rate_by_hand():
    rows = rows_from([1.0, 2.0, -0.5, 0.0], [0.5, 0.5, 0.5, 0.5], [-1.0, -2.0, -3.0, -2.0], [0.0, 0.0, 0.0, 0.0])
    s = summarize(rows, SummaryConfig(n_boot=500))
    d = s["gaps"]["deletion"]
    assert d["grad_norm"]["random"]["mean_gap"] == pytest.approx(0.625)  # (1 + 2 - 0.5 + 0) / 4
    assert d["grad_norm"]["random"]["win_rate"] == pytest.approx(0.625)  # (2 wins + 1 tie / 2) / 4
    assert d["grad_x_input"]["random"]["win_rate"] == 0.0
    assert d["grad_x_input"]["length"]["win_rate"] == 0.5  # all ties
    assert d["grad_norm"]["length"]["n"] == 4
    # Constant gaps: every resample has the same mean, so the CI is that value.
    assert d["grad_norm"]["length"]["ci"] == [pytest.approx(0.5), pytest.approx(0.5)]
    assert d["grad_norm"]["length"]["verdict"] == "beats"
    assert d["grad_x_input"]["length"]["verdict"] == "within noise"  # CI [0, 0]
    assert d["grad_x_input"]["random"]["verdict"] == "worse"  # every resample mean is in [-3, -1]
    assert d["grad_norm"]["random"]["verdict"] == "within noise"
    assert s["verdicts"] == {"grad_norm": "within noise", "grad_x_input": "worse than random"}
    assert s["mean_aopc"]["insertion"] == {"grad_norm": 1.0, "grad_x_input": 0.5, "random": 0.25, "length": 0.75}
    assert s["methods"] == ["grad_norm", "grad_x_input"] and s["baselines"] == ["random", "length"]
    json.dumps(s)  # JSON-able
    flat = table(s)
    assert len(flat) == 2 * 2 * 2 and flat[0]["verdict_overall"] == "within noise"


def test_beats_every_baseline_in_every_mode():
    rows = rows_from([1.0, 2.0], [0.5, 1.5], [-1.0, 1.0], [1.0, 1.0])
    s = summarize(rows, SummaryConfig(n_boot=200))
    assert s["verdicts"]["grad_norm"] == "beats random and length"  # every resample mean > 0
    assert s["verdicts"]["grad_x_input"] == "within noise"  # vs random: resamples include -1 and +1


def test_bootstrap_interval_of_two_values_is_their_range():
    """Gaps [0, 1]: a resample's mean is 0, 1/2 or 1 with probability 1/4, 1/2, 1/4, so the 2.5 %
    and 97.5 % quantiles of many resample means are 0 and 1, and the median 1/2."""
    index = np.random.default_rng(0).integers(0, 2, size=(4000, 2))
    assert bootstrap_ci(np.array([0.0, 1.0]), index, 0.95) == (0.0, 1.0)
    assert bootstrap_ci(np.array([0.0, 1.0]), index, 0.01) == (0.5, 0.5)
    rows = rows_from([0.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    s = summarize(rows, SummaryConfig(n_boot=4000, seed=3))
    assert s["gaps"]["insertion"]["grad_norm"]["random"]["ci"] == [0.0, 1.0]
    assert s["gaps"]["insertion"]["grad_norm"]["random"]["verdict"] == "within noise"


def test_win_rate_counts_ties_as_half():
    assert win_rate(np.array([1.0, -1.0, 0.0, 0.0])) == 0.5
    assert win_rate(np.array([2.0])) == 1.0


def test_mean_curve_interpolates_rows_with_different_lengths():
    a = fake_row({"deletion": {"m": {"random": 0.0}}}, {"deletion": {"m": 0.0, "random": 0.0}}, n_removed=(0, 1, 2),
                 logprobs={("deletion", "m"): [-1.0, -2.0, -3.0]}, original=-1.0)
    b = fake_row({"deletion": {"m": {"random": 0.0}}}, {"deletion": {"m": 0.0, "random": 0.0}}, n_removed=(0, 4),
                 logprobs={("deletion", "m"): [-1.0, -5.0]}, original=-1.0)
    ys = mean_curve([a, b], "deletion", "m")  # at fractions 0, 0.1, ..., 1
    assert len(ys) == 11
    assert ys[0] == 0.0
    assert ys[5] == pytest.approx((-1.0 + -2.0) / 2)  # row a: -1 at 1/2; row b: -4 * 1/2
    assert ys[1] == pytest.approx((-0.2 + -0.4) / 2)
    assert ys[10] == pytest.approx((-2.0 + -4.0) / 2)
    # insertion curves are relative to the all-removed log-prob
    c = fake_row({"insertion": {"m": {"random": 0.0}}}, {"insertion": {"m": 0.0, "random": 0.0}}, n_removed=(0, 2),
                 logprobs={("insertion", "m"): [-3.0, -1.0]}, empty=-3.0)
    assert mean_curve([c], "insertion", "m")[10] == pytest.approx(2.0)


def test_rows_with_other_settings_or_none_are_refused():
    with pytest.raises(SalienceError, match="at least one row"):
        summarize([])
    a = rows_from([1.0], [1.0], [1.0], [1.0])[0]
    b = fake_row({mode: {"grad_norm": {"random": 1.0}} for mode in MODES},
                 {mode: {"grad_norm": 1.0, "random": 0.0} for mode in MODES})
    with pytest.raises(SalienceError, match="same settings"):
        summarize([a, b])
    with pytest.raises(SalienceError, match="n_boot"):
        SummaryConfig(n_boot=0)


def rows_with_aopc(gn: list[float], gx: list[float], decidable: list[bool] | None = None) -> list[dict]:
    """Rows whose AOPCs (both modes) are grad_norm = gn[i], grad_x_input = gx[i], random 0, length 0."""
    rows = []
    for i, (a, b) in enumerate(zip(gn, gx)):
        aopc = {"grad_norm": a, "grad_x_input": b, "random": 0.0, "length": 0.0}
        gaps = {"grad_norm": {"random": a, "length": a}, "grad_x_input": {"random": b, "length": b}}
        row = fake_row({mode: gaps for mode in MODES}, {mode: aopc for mode in MODES})
        if decidable is not None:
            row["decidable"] = {"deletion": decidable[i], "insertion": True}
            row["upper_bound"] = {"deletion": 2.0 + i, "insertion": 4.0}
        rows.append(row)
    return rows


def test_paired_comparison_with_the_reference_by_hand():
    # d = grad_x_input - grad_norm = [1, -1, 0, 2]: mean 0.5, better on 2 rows, worse on 1, tied on 1.
    rows = rows_with_aopc([1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 3.0, 6.0])
    cfg = SummaryConfig(n_boot=3000, seed=7)
    s = summarize(rows, cfg)
    assert s["reference"] == "grad_norm"  # the default reference
    p = s["pairs"]["deletion"]["grad_x_input"]
    assert set(s["pairs"]["deletion"]) == {"grad_x_input"}  # no pair of the reference with itself
    assert p["mean_diff"] == pytest.approx(0.5)
    assert (p["better"], p["worse"], p["tied"], p["n"]) == (2, 1, 1, 4)
    assert p["reference"] == "grad_norm"
    # The bootstrap, reimplemented with plain numpy: the same seeded resamples of the 4 rows.
    d = np.array([1.0, -1.0, 0.0, 2.0])
    index = np.random.default_rng(7).integers(0, 4, size=(3000, 4))
    means = d[index].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    assert p["ci"] == [pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12)]
    assert -1.0 <= lo < 0.5 < hi <= 2.0  # resample means lie between the smallest and largest d
    assert p["verdict"] == "within noise"  # the CI spans 0
    # Another reference: the differences change sign, better and worse swap.
    s2 = summarize(rows, SummaryConfig(n_boot=3000, seed=7, reference="grad_x_input"))
    q = s2["pairs"]["insertion"]["grad_norm"]
    assert q["mean_diff"] == pytest.approx(-0.5) and (q["better"], q["worse"], q["tied"]) == (1, 2, 1)
    assert q["ci"] == [pytest.approx(-hi, abs=1e-12), pytest.approx(-lo, abs=1e-12)]
    json.dumps(s)
    flat = [r for r in pairs_table(s) if r["mode"] == "deletion"]
    assert flat == [{"mode": "deletion", "method": "grad_x_input", **p}]


def test_paired_comparison_constant_difference_and_unknown_reference():
    s = summarize(rows_with_aopc([1.0, 2.0, 3.0], [1.5, 2.5, 3.5]), SummaryConfig(n_boot=200))
    p = s["pairs"]["deletion"]["grad_x_input"]
    assert p["ci"] == [pytest.approx(0.5), pytest.approx(0.5)] and p["verdict"] == "beats"
    assert (p["better"], p["worse"], p["tied"]) == (3, 0, 0)
    with pytest.raises(SalienceError, match="reference method 'smooth_grad' was not evaluated"):
        summarize(rows_with_aopc([1.0], [1.0]), SummaryConfig(reference="smooth_grad"))


def test_not_decidable_rows_are_counted_and_printed():
    rows = rows_with_aopc([1.0, 2.0, 3.0], [2.0, 1.0, 3.0], decidable=[False, True, False])
    s = summarize(rows, SummaryConfig(n_boot=200))
    assert s["not_decidable"] == {"deletion": 2, "insertion": 0}
    assert s["mean_upper_bound"] == {"deletion": pytest.approx(3.0), "insertion": pytest.approx(4.0)}
    lines = summary_lines(s)
    assert "not decidable on this prompt (deletion): 2 of 3 rows" in "\n".join(lines)
    assert any(ln.startswith("grad_x_input vs grad_norm (deletion): AOPC difference +0.000") and
               "better on 1, worse on 1, tied on 1 of 3 rows" in ln for ln in lines)
    # Rows without the bound (an older run): no count rather than a wrong one.
    assert "not_decidable" not in summarize(rows_with_aopc([1.0], [2.0]), SummaryConfig(n_boot=10))


def test_report_section_shows_pairs_and_undecidable_rows_escaped():
    from sequence_salience.evaluate.report import pairs_section

    rows = rows_with_aopc([1.0, 2.0], [2.0, 1.0], decidable=[False, True])
    s = summarize(rows, SummaryConfig(n_boot=50))
    page = pairs_section(s, [{"id": "<b>row</b>", "line": 1, "evaluation": rows[0]},
                             {"id": "two", "line": 2, "evaluation": rows[1]}])
    assert "Paired comparisons with grad_norm" in page and "<td>+0.000</td>" in page  # d = [+1, -1]
    assert "<td>1</td><td>1</td><td>0</td>" in page  # better, worse, tied
    assert "<td>1 of 2</td>" in page and "1: &lt;b&gt;row&lt;/b&gt;" in page and "<b>row" not in page
    assert "2: two" not in page  # a decidable row is not listed
    assert pairs_section({"n_rows": 1}) == ""  # an older summary: no section
