"""A method named twice in one explanation test (or --method) is refused before any model work: each repeat
was computed again (`leave_one_out` x500 ran 500 times as long; IG repeated stepped around its step cap)."""

from __future__ import annotations

import pytest

from sequence_salience import SalienceError, field_rules
from sequence_salience.cli.common import UsageError, parse_methods
from sequence_salience.explain.contrastive import contrastive_salience
from sequence_salience.explain.faithfulness import CurvesRequest, faithfulness_curves, faithfulness_stages


def test_distinct_names_refuses_a_repeat_naming_it_and_how_often():
    assert field_rules.distinct_names(["grad_norm", "leave_one_out"]) == ("grad_norm", "leave_one_out")
    with pytest.raises(field_rules.FieldError, match=r"'leave_one_out' is named 500 times; name each method once"):
        field_rules.distinct_names(["leave_one_out"] * 500)
    with pytest.raises(field_rules.FieldError, match=r"'a' is named 2 times, 'b' is named 3 times"):
        field_rules.distinct_names(["a", "b", "a", "b", "b", "c"])


@pytest.mark.parametrize("run", [
    pytest.param(lambda m: faithfulness_curves(None, CurvesRequest("p", "t", m)), id="faithfulness_curves"),
    pytest.param(lambda m: faithfulness_stages(None, CurvesRequest("p", "t", m)), id="faithfulness_stages"),
    pytest.param(lambda m: contrastive_salience(None, "p", "t", "f", m), id="contrastive_salience"),
])
def test_the_explanation_tests_refuse_a_repeated_method_before_touching_the_model(run):
    # lm=None: any model work would raise AttributeError instead.
    with pytest.raises(SalienceError, match="'integrated_gradients' is named 3 times"):
        run(["integrated_gradients", "grad_norm", "integrated_gradients", "integrated_gradients"])


def test_cli_method_flag_refuses_a_repeat():
    assert parse_methods("grad_norm, leave_one_out") == ("grad_norm", "leave_one_out")
    with pytest.raises(UsageError, match="--method: 'grad_norm' is named 2 times"):
        parse_methods("grad_norm,grad_norm")
