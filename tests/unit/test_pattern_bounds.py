"""The bounds of a user regex pattern (PatternBounds), checked before anything compiles it.

The cases are hand-derived and shared with the page's checker (tests/data/pattern_bounds_cases.json, read by
frontend/test/pattern_bounds.test.ts too); the file's `bounds` are the declaration's.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import time
from pathlib import Path

import pytest

from sequence_salience import SalienceError
from sequence_salience.aggregate import PATTERN_BOUNDS, PatternBounds, check_pattern, compile_pattern

DATA = json.loads((Path(__file__).parents[1] / "data" / "pattern_bounds_cases.json").read_text(encoding="utf-8"))
LOOSE = PatternBounds(max_chars=10**6, max_repeat=10**6, max_expanded=10**9, max_depth=10**6)


def _pattern(case: dict) -> str:
    return case["pattern"] if "pattern" in case else "".join(text * times for text, times in case["repeat"])


def test_the_case_file_holds_the_declared_bounds():
    # The page's test reads its bounds from the file: they must be the ones the server publishes.
    assert DATA["bounds"] == PATTERN_BOUNDS.as_json()


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["sizes"]])
def test_written_out_length_and_depth_are_the_hand_derived_ones(case):
    pattern, expanded, depth = case["pattern"], case["expanded"], case["depth"]
    check_pattern(pattern, dataclasses.replace(LOOSE, max_expanded=expanded, max_depth=max(depth, 1)))
    with pytest.raises(SalienceError, match="longer than"):
        check_pattern(pattern, dataclasses.replace(LOOSE, max_expanded=expanded - 1))
    if depth:
        with pytest.raises(SalienceError, match="nest deeper"):
            check_pattern(pattern, dataclasses.replace(LOOSE, max_depth=depth - 1))


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["refused"]])
def test_refused_before_compiling_naming_the_bound_and_the_fix(case):
    start = time.perf_counter()
    with pytest.raises(SalienceError) as err:
        compile_pattern(_pattern(case))
    assert time.perf_counter() - start < 0.1
    assert case["message"] in str(err.value) and "Fix" in str(err.value), str(err.value)
    assert len(str(err.value)) < 400  # a long pattern is quoted shortened


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["accepted"]])
def test_accepted_within_the_bounds(case):
    compile_pattern(_pattern(case))


def test_the_bomb_costs_no_memory():
    """`a{99999999}` grew a server to 9.6 GB when it was compiled; now it is refused before."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for pattern in ("a{99999999}", "(a{1000}){1000}", "(" * 900 + ")" * 90):
        with pytest.raises(SalienceError):
            compile_pattern(pattern)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 10_000  # KiB


def test_unbounded_on_request():
    # bounds=None: only the dialect (a caller that knows its patterns, e.g. its own constants).
    check_pattern("a{5000}", None)


@pytest.mark.parametrize("command", ["explain", "evaluate"])
def test_the_cli_refuses_a_pattern_bomb_naming_the_flag_before_loading_a_model(command, tmp_path, capsys):
    from sequence_salience import cli  # pylint: disable=import-outside-toplevel

    args = ["--prompt", "x"] if command == "explain" else ["--batch", str(tmp_path / "p.jsonl"), "--out",
                                                           str(tmp_path / "out")]
    start = time.perf_counter()
    code = cli.main([command, "--model", str(tmp_path / "no-model"), *args, "--granularity", "regex",
                     "--pattern", "a{99999999}"])
    assert code == cli.EXIT_USAGE and time.perf_counter() - start < 2
    assert "--pattern: regex pattern 'a{99999999}': the repeat count 99999999" in capsys.readouterr().err
