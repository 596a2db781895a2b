"""The span rule (sequence_salience/result.py span_from_rows) on the cases shared with the browser.

tests/data/span_cases.json is read here and by frontend/test/span_cases.test.ts (salience/spans.ts),
so Python and the browser compute a target span's salience from the same rows by the same rule.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from sequence_salience.methods import get_method, grad_norm, list_methods
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.result import SalienceResult, span_from_rows

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "tests/data/span_cases.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["cases"]])
def test_shared_span_case(case):
    gram = None if case["gram"] is None else np.array(case["gram"], dtype=np.float32)
    got = span_from_rows(np.array(case["matrix"], dtype=np.float32), gram, *case["span"], case["method"]["linear"])
    if case["expected"] is None:
        assert got is None
    else:
        assert got is not None and got.dtype == np.float32
        np.testing.assert_allclose(got, case["expected"], rtol=0, atol=1e-6)


def test_the_registry_publishes_linear_for_the_span_rule():
    # The rule reads `linear`, not `signed`: each token method's record says which it is.
    assert {m: get_method(m).linear for m in list_methods()} == {
        "grad_norm": False, "grad_x_input": True, "integrated_gradients": True, "smooth_grad": True}


def _result(matrix: np.ndarray) -> SalienceResult:
    T, N = matrix.shape
    return SalienceResult(
        text="ab", prompt_end=1, ids=np.arange(N), tokens=("a",) * N, offsets=np.zeros((N, 2), np.int64),
        special=np.zeros(N, bool), n_prompt_tokens=N - T, target_logprobs=np.zeros(T, np.float32),
        matrices={grad_norm.NAME: matrix}, role_spans=(),
        config=SalienceConfig())


def test_a_result_without_a_gram_answers_one_token_spans_of_a_norm_method():
    rows = np.array([[3, 2, 0], [4, 2, 1]], dtype=np.float32)  # [T=2, N=3]
    result = _result(rows)
    assert result.has_span(grad_norm.NAME, 1, 2)
    np.testing.assert_array_equal(result.span_salience(grad_norm.NAME, 1, 2), rows[1])
    assert not result.has_span(grad_norm.NAME, 0, 2)
