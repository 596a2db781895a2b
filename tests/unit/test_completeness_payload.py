"""The completeness check the salience payload carries (lit_app/wrappers/payloads.py completeness_payload,
display/view.py completeness_check): for each method whose record names an `error_extra` (IG), the tolerance and, per
target span with values, the error, the log-p change, the relative error and whether it is rejected. On a tiny random
Llama both ways: a few fixed steps fail the check, the steps search makes it hold (the default model fails it at
every affordable count: tests/e2e/test_ig_completeness.py shows the browser hiding the values there).

Independent reference: the relative error recomputed here from the result's arrays (the error extra summed over the
span; the change = the attributions' sum minus the error).
"""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from lit_app.wrappers.payloads import salience_payload
from sequence_salience import field_rules
from sequence_salience.methods import all_records
from tests.unit.tiny_models import MODEL_BUILDERS, wrap

PROMPT, TARGET = "The capital of France is", " Paris. The capital"
IG = "integrated_gradients"


@pytest.fixture(scope="module")
def llama() -> ss.LanguageModel:
    return wrap(MODEL_BUILDERS["llama"](seed=0), "llama")


def _expected_relative(result, t0: int, t1: int) -> float:
    err = float(np.sum(result.extras["ig_completeness_error"][t0:t1], dtype=np.float64))
    total = float(np.sum(result.matrices[IG][t0:t1], dtype=np.float64))
    return abs(err) / abs(total - err)


def test_only_methods_whose_record_names_an_error_extra_are_checked(llama):
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG, "grad_x_input"),
                                 config=ss.SalienceConfig(ig_steps=2))
    checked = {r.name for r in all_records() if getattr(r, "error_extra", None) is not None}
    assert set(salience_payload(result)["completeness"]) == checked and IG in checked


def test_few_steps_are_rejected_with_the_relative_error_and_the_stated_tolerance(llama):
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,), config=ss.SalienceConfig(ig_steps=2))
    entry = salience_payload(result)["completeness"][IG]
    t = result.num_targets
    check = entry["spans"][f"0:{t}"]
    assert entry["tolerance"] == field_rules.IG_TOLERANCE.default  # no search: the one stated tolerance
    assert check["relative"] == pytest.approx(_expected_relative(result, 0, t), rel=1e-6)
    assert check["relative"] > entry["tolerance"] and check["rejected"] is True
    assert check["change"] == pytest.approx(float(np.sum(result.matrices[IG], dtype=np.float64)) - check["error"],
                                            rel=1e-6)
    method = salience_payload(result)["methods"][IG]
    assert method["steps_used"][0] == 2 and method["forwards"][0] == 4  # the cost, from the record's extras


def test_the_steps_search_makes_the_check_hold(llama):
    tol = 0.01
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,),
                                 config=ss.SalienceConfig(ig_steps=4, ig_search_tolerance=tol))
    entry = salience_payload(result)["completeness"][IG]
    t = result.num_targets
    check = entry["spans"][f"0:{t}"]
    assert entry["tolerance"] == tol  # the search's tolerance is the one the values are held to
    assert check["relative"] == pytest.approx(_expected_relative(result, 0, t), rel=1e-6)
    assert check["relative"] <= tol and check["rejected"] is False
    assert salience_payload(result)["methods"][IG]["steps_used"][0] > 4  # it searched


def test_a_span_computed_directly_carries_its_own_check(llama):
    tol = 0.01
    result = ss.compute_span_result(llama, PROMPT, TARGET, methods=(IG,), t0=1, t1=3,
                                    config=ss.SalienceConfig(ig_steps=4, ig_search_tolerance=tol))
    check = salience_payload(result)["completeness"][IG]["spans"]["1:3"]
    err = result.span_ig_errors[(1, 3)]
    values = result.span_salience(IG, 1, 3).astype(np.float64)
    assert check["error"] == pytest.approx(err) and check["relative"] == pytest.approx(
        abs(err) / abs(values.sum() - err), rel=1e-6)
    assert check["rejected"] is False


def test_with_the_matrix_each_response_token_carries_its_check(llama):
    """Each row of the answer x prompt matrix (one response token) has the server's verdict, so that the heatmap reads
    it rather than deriving it; the reference: each row's relative error from the result's arrays."""
    result = ss.compute_salience(llama, PROMPT, TARGET, methods=(IG,), config=ss.SalienceConfig(ig_steps=2))
    entry = salience_payload(result)["completeness"][IG]
    t = result.num_targets
    assert set(entry["spans"]) == {f"0:{t}"} | {f"{k}:{k + 1}" for k in range(t)}
    for k in range(t):
        check = entry["spans"][f"{k}:{k + 1}"]
        assert check["relative"] == pytest.approx(_expected_relative(result, k, k + 1), rel=1e-6)
        assert check["rejected"] is (check["relative"] is not None and check["relative"] > entry["tolerance"])
