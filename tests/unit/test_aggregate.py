"""Tests for sequence_salience.aggregate: shared JSON cases plus property tests.

The same JSON file (tests/data/aggregation_cases.json) is checked by
frontend/test/aggregate.test.ts, so Python and the browser agree.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sequence_salience import aggregate as agg
from sequence_salience.errors import SalienceError

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "tests/data/aggregation_cases.json").read_text(encoding="utf-8"))


def _nan(x):
    """JSON null -> NaN, recursively, as a float array."""
    if isinstance(x, list):
        return [_nan(v) for v in x]
    return np.nan if x is None else float(x)


def _run_case(case):
    seg = agg.segment(
        case["text"],
        case["offsets"],
        case["granularity"],
        pattern=case.get("pattern"),
        role_spans=case.get("role_spans"),
    )
    values = agg.aggregate(
        case["scores"], seg, case["reduction"], keep_excluded=case.get("keep_excluded", False)
    )
    return seg, values


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["cases"]])
def test_shared_case(case):
    seg, values = _run_case(case)
    expected = case["expected"]
    assert [list(s) for s in seg.spans()] == expected["segments"]
    if expected["segment_texts"] is not None:
        assert seg.texts(case["text"]) == expected["segment_texts"]
    assert seg.token_segment.tolist() == expected["token_segment"]
    assert seg.excluded.tolist() == [k == "markup" for k in seg.kinds]
    np.testing.assert_allclose(values, np.array(_nan(expected["aggregated"])).reshape(values.shape),
                               rtol=0, atol=1e-9, equal_nan=True)
    assert np.shape(values) == np.shape(np.array(_nan(expected["aggregated"])))
    if "matches_only" in expected:  # regex: the text between matches is context, not scored
        np.testing.assert_allclose(agg.matches_only(values, seg), _nan(expected["matches_only"]),
                                   rtol=0, atol=1e-9, equal_nan=True)
    elif case["granularity"] != "regex":
        np.testing.assert_array_equal(agg.matches_only(values, seg), values)


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["regex_errors"]])
def test_regex_rejected(case):
    with pytest.raises(SalienceError, match=re.escape(case["message"])) as info:
        agg.segment("abc", [[0, 1]], "regex", pattern=case["pattern"])
    assert "Fix" in str(info.value)


@pytest.mark.parametrize("pattern", [r"(a|a)+$", r"(a|aa)+$"])
def test_catastrophic_pattern_is_stopped_with_a_one_line_error(pattern):
    # With Python's `re` these take about 2^40 steps; the time limit turns them into an error.
    text = "a" * 40 + "!"
    assert agg.matchers_idle(10)  # (a runaway of the case before ends at the package's own limit, after its refusal)
    with pytest.raises(SalienceError) as info:
        agg.segment(text, [[i, i + 1] for i in range(len(text))], "regex", pattern=pattern)
    message = str(info.value)
    assert pattern in message and "simplify the pattern" in message and "\n" not in message


def test_a_match_starved_of_cpu_is_refused_at_the_wall_time_bound(monkeypatch):
    """The `regex` package's timeout counts the process's CPU time across a finditer's matches (C `clock()`): a match
    that gets a fraction of a core (load ~11 on 2 cores) ran 3.5 s past its 1 s. Here a matcher that uses no CPU at
    all (it waits on an event, as a starved thread does) yields its one match only after `release` is set (or 10 s):
    the caller is refused while it is still running (was: waited for it, then took its match)."""
    from sequence_salience.aggregate import patterns, segments  # pylint: disable=import-outside-toplevel

    release, finished = threading.Event(), threading.Event()

    class Starved:
        def finditer(self, text, **_kwargs):
            release.wait(10)
            yield re.search("b", text)
            finished.set()

    monkeypatch.setattr(patterns, "compile_pattern", lambda _pattern: Starved())
    monkeypatch.setattr(segments, "compile_pattern", lambda _pattern: Starved(), raising=False)  # where it was used
    try:
        with pytest.raises(SalienceError, match="took over 1 s on 3 characters"):
            agg.segment("abc", [[0, 1], [1, 2], [2, 3]], "regex", pattern="b")
        assert not finished.is_set()  # refused while the match still ran
    finally:
        release.set()
    assert finished.wait(10)


def test_a_burst_of_runaway_patterns_holds_one_matcher_thread_and_a_valid_pattern_matches_after(monkeypatch):
    """Issue 43: a refused runaway match keeps its thread until the `regex` package's own limit (1 s of the process's
    CPU), so a burst of N bomb requests ran N matchers at once (was: N live "pattern-match" threads here). Now at most
    MATCHER_SLOTS run: the other requests wait their budget for a slot and are refused as busy, naming the pattern
    and saying to send it again; once the runaway ends, a valid pattern matches. The runaway is a matcher that uses
    no CPU (it waits on `release`), so the test burns none."""
    from sequence_salience.aggregate import patterns  # pylint: disable=import-outside-toplevel
    from sequence_salience.errors import PatternBusy  # pylint: disable=import-outside-toplevel

    release, compile_real = threading.Event(), patterns.compile_pattern

    class Runaway:
        def finditer(self, text, **_kwargs):
            release.wait(10)
            yield from re.finditer("b", text)

    assert agg.matchers_idle(10)  # the catastrophic patterns' runaways above end at their own limit
    monkeypatch.setattr(patterns, "compile_pattern", lambda p: Runaway() if p == "bomb" else compile_real(p))
    errors: list[Exception] = []

    def request() -> None:
        try:
            agg.match_spans("bomb", "abc", timeout_s=0.2)
        except SalienceError as e:
            errors.append(e)

    burst = [threading.Thread(target=request) for _ in range(6)]
    try:
        for t in burst:
            t.start()
        for t in burst:
            t.join(10)
        live = [t for t in threading.enumerate() if t.name == "pattern-match" and t.is_alive()]
        assert len(live) == patterns.MATCHER_SLOTS == 2, f"{len(live)} matcher threads live after 6 runaways"
        assert len(errors) == 6  # every request answered: two timed out, the rest busy
        busy = [e for e in errors if isinstance(e, PatternBusy)]
        assert len(busy) == 4 and all("'bomb'" in str(e) and "again" in str(e) for e in busy), errors
        with pytest.raises(PatternBusy):  # while the runaway still runs, a valid pattern waits, then is refused
            agg.match_spans("b", "abc", timeout_s=0.05)
    finally:
        release.set()
    assert agg.matchers_idle(10)  # the runaways end once released, and free their slots
    assert agg.match_spans("b", "abcb") == [(1, 2), (3, 4)]



def test_match_spans_lists_every_non_empty_match_in_order():
    text = "ab " * 2000
    assert agg.match_spans(r"ab", text) == [(3 * i, 3 * i + 2) for i in range(2000)]


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["bad_inputs"]])
def test_bad_input(case):
    with pytest.raises(SalienceError, match=re.escape(case["message"])):
        seg = agg.segment(case["text"], case["offsets"], case["granularity"],
                          role_spans=case.get("role_spans"))
        agg.aggregate(case["scores"], seg, case.get("reduction", "sum"))


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["normalization"]])
def test_normalization(case):
    values = np.array(_nan(case["values"]))
    excluded = None if case["excluded"] is None else np.array(case["excluded"], dtype=bool)
    if case["method"] == "max_abs":
        got = agg.normalize_max_abs(values, excluded)
    else:
        got = agg.normalize_percentile(values, case["q"], excluded)
    np.testing.assert_allclose(got, np.array(_nan(case["expected"])), rtol=0, atol=1e-12, equal_nan=True)


def test_percentile_matches_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        a = rng.normal(size=n)
        for q in (0, 12.5, 50, 95, 100):
            assert agg.percentile(a, q) == pytest.approx(np.percentile(a, q), abs=1e-12)


def test_percentile_rejects_bad_q():
    with pytest.raises(SalienceError, match="outside"):
        agg.normalize_percentile([1.0], q=120)


def test_module_imports_only_numpy_regex_and_stdlib():
    # `regex`: user patterns matched with a time limit (a declared dependency, light as numpy).
    names = set()
    for path in sorted((ROOT / "sequence_salience/aggregate").glob("*.py")):  # the package's modules
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names.add((node.module or "").split(".")[0])
    assert names <= {"__future__", "dataclasses", "re", "collections", "threading", "numpy", "regex",
                     "sequence_salience"}


def test_aggregate_salience_convenience():
    seg, values = agg.aggregate_salience("a b", [[0, 1], [1, 3]], [1.0, 2.0], "word")
    assert seg.texts("a b") == ["a ", "b"]
    assert values.tolist() == [1.0, 2.0]


# ----------------------------------------------------------------------------
# Property tests.

FRAGMENTS = [
    "Hello", "world", "Dr.", "3.14", "e.g.", "U.S.", " ", "  ", "\n", "\n\n", "\r\n", ".", "!", "?", ",", "...",
    "<|im_start|>", "<|im_end|>", "\U0001F600", "\u6771\u4eac", "\u3002", "\u00a0", "don't", "1.", "\t",
    "na\u0303o", "\u2764\ufe0f", "x", "(", ")", "-", "\"", "user", "model", "<start_of_turn>",
]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join)
PARTITIONING = ["word", "sentence", "paragraph", "line", "regex", "role"]


def _role_spans(text, cuts):
    points = sorted({0, len(text), *[c % (len(text) + 1) for c in cuts]})
    roles = ["system", "user", "markup", "assistant"]
    return [(a, b, roles[i % 4]) for i, (a, b) in enumerate(zip(points, points[1:]))]


def _segment(text, offsets, granularity, cuts=()):
    return agg.segment(text, offsets, granularity, pattern=r"[A-Za-z]+|\d+(?:\.\d+)?",
                       role_spans=_role_spans(text, cuts))


def _random_offsets(text, cuts, empties):
    points = sorted({0, len(text), *[c % (len(text) + 1) for c in cuts]})
    offsets = [[a, b] for a, b in zip(points, points[1:])]
    for e in empties:  # special tokens with empty spans
        p = e % (len(text) + 1)
        offsets.append([p, p])
    return offsets


@settings(max_examples=200, deadline=None)
@given(texts, st.sampled_from(PARTITIONING), st.lists(st.integers(0, 400), max_size=6))
def test_segments_partition_text(text, granularity, cuts):
    seg = _segment(text, [], granularity, cuts)
    if not text:
        assert len(seg) == 0
        return
    assert seg.starts[0] == 0 and seg.ends[-1] == len(text)
    assert (seg.ends[:-1] == seg.starts[1:]).all()
    assert (seg.ends > seg.starts).all()
    assert "".join(seg.texts(text)) == text


@settings(max_examples=200, deadline=None)
@given(texts.filter(bool), st.sampled_from(PARTITIONING + ["token"]), st.lists(st.integers(0, 400), max_size=40),
       st.lists(st.integers(0, 400), max_size=3), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_sum_conserves_total(text, granularity, cuts, empties, n_targets, seed):
    offsets = _random_offsets(text, cuts, empties)
    scores = np.random.default_rng(seed).normal(size=(n_targets, len(offsets)))  # [T, N]
    seg = _segment(text, offsets, granularity, cuts)
    assert seg.token_segment.min() >= 0 and seg.token_segment.max() < len(seg)
    values = agg.aggregate(scores, seg, "sum", keep_excluded=True)  # [T, S]
    np.testing.assert_allclose(values.sum(-1), scores.sum(-1), atol=1e-9)
    # Excluded segments are NaN by default; the rest is unchanged.
    masked = agg.aggregate(scores, seg, "sum")
    assert np.isnan(masked[:, seg.excluded]).all()
    np.testing.assert_array_equal(masked[:, ~seg.excluded], values[:, ~seg.excluded])
    abs_values = agg.aggregate(scores, seg, "abs_sum", keep_excluded=True)
    np.testing.assert_allclose(abs_values.sum(-1), np.abs(scores).sum(-1), atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(texts, st.sampled_from(PARTITIONING + ["token"]), st.lists(st.integers(0, 400), max_size=6))
def test_markup_units_are_atomic_and_excluded(text, granularity, cuts):
    """A marker with its role name ("<|im_start|>user") is never split and never scored."""
    offsets = [[k, k + 1] for k in range(len(text))]  # one token per character
    seg = _segment(text, offsets, granularity, cuts)
    for m in re.finditer(agg.MARKUP_PATTERN, text):
        if granularity != "token":  # token segments are the tokens themselves
            assert not any(m.start() < s < m.end() for s in seg.starts.tolist())
        chars = np.arange(m.start(), m.end())
        assert seg.excluded[seg.token_segment[chars]].all(), (text, m.group(), seg.spans())


def _aligned_offsets(text, seg, shifts, extra_cuts):
    """A tokenization whose tokens never straddle segments except by leading whitespace.

    Each segment start may move left into the whitespace before it (GPT-2's "Ġthe");
    extra cuts split tokens inside segments.
    """
    ws = set(agg.WHITESPACE)
    cuts = {0, len(text)}
    for i, s in enumerate(seg.starts.tolist()):
        shift = shifts[i % len(shifts)] if shifts else 0
        while shift > 0 and s > 0 and text[s - 1] in ws:
            s -= 1
            shift -= 1
        cuts.add(s)
    cuts |= {c % (len(text) + 1) for c in extra_cuts}
    points = sorted(cuts)
    return [[a, b] for a, b in zip(points, points[1:])]


@settings(max_examples=200, deadline=None)
@given(texts.filter(bool), st.sampled_from(["word", "sentence", "paragraph", "line", "regex"]),
       st.lists(st.integers(0, 3), max_size=5), st.lists(st.integers(0, 3), max_size=5),
       st.lists(st.integers(0, 400), max_size=20), st.lists(st.integers(0, 400), max_size=20))
def test_uniform_scores_independent_of_tokenization(text, granularity, shifts_a, shifts_b, cuts_a, cuts_b):
    base = _segment(text, [], granularity)
    ws = set(agg.WHITESPACE)
    results = []
    for shifts, cuts in ((shifts_a, cuts_a), (shifts_b, cuts_b)):
        offsets = _aligned_offsets(text, base, shifts, cuts)
        # Uniform salience per (non-space) character.
        scores = np.array([sum(c not in ws for c in text[a:b]) for a, b in offsets], dtype=float)  # [N]
        seg = _segment(text, offsets, granularity)
        np.testing.assert_array_equal(seg.starts, base.starts)
        results.append(agg.aggregate(scores, seg, "sum", keep_excluded=True))
        ones = agg.aggregate(np.ones(len(offsets)), seg, "max", keep_excluded=True)
        assert set(np.unique(ones[~np.isnan(ones)])) <= {1.0}
    np.testing.assert_array_equal(results[0], results[1])
    expected = [sum(c not in ws for c in t) for t in base.texts(text)]
    np.testing.assert_array_equal(results[0], expected)
