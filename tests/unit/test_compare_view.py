"""Which comparison view a comparison belongs to (`compare_view`, lit_app/wrappers/compare.py): the field the browser
sends, not a guess from the fields' equality. A client's comparison that computes salience supersedes that client's
running one of its own view only (Compare models beside Compare an edit).

Was: the view was inferred (the selected datapoint equal to the pinned one read as Compare models), so Compare an
edit of a pinned datapoint left unchanged stopped the running Compare models comparison (and was stopped by it).

On the LIT compare wrapper over a seeded tiny Llama (tests/unit/tiny_lit.py); the running comparison of the other
view is a job entered in the wrapper's own lane as its request would (`CompareModel.jobs.start`).
"""

from __future__ import annotations

import pytest

from lit_app.edge import clients
from lit_app.errors import RequestError
from lit_app.model import cancel
from lit_app.schema import fields
from lit_app.wrappers.compare import CompareModel
from tests.unit.tiny_lit import tiny_salience_lit

tiny = pytest.fixture(scope="module", name="tiny")(tiny_salience_lit)

PAGE = "tab-1"
PROMPT, TARGET = "one two three", " four five"
# Compare an edit of a pinned datapoint the user has not edited yet: pinned == selected, field for field.
UNCHANGED_PIN = {fields.PROMPT: PROMPT, fields.TARGET: TARGET, fields.PINNED_PROMPT: PROMPT,
                 fields.PINNED_TARGET: TARGET, fields.CHAT: False, fields.WITH_PINNED_SALIENCE: True}


@pytest.fixture
def compare(tiny) -> CompareModel:
    _, shared, _ = tiny
    return CompareModel(shared)


def _running(compare: CompareModel, view: str):
    """A running comparison of `view` from PAGE, as its request enters it."""
    with clients.acting_as(PAGE):
        return compare.jobs.start("comparison", "salience", view=view, why=cancel.SUPERSEDED)


def _ask(compare: CompareModel, **extra) -> dict:
    with clients.acting_as(PAGE):
        return compare.predict([{**UNCHANGED_PIN, **extra}])[0][fields.COMPARE]


@pytest.mark.parametrize("running, sent", [
    pytest.param(fields.COMPARE_VIEW_MODELS, fields.COMPARE_VIEW_EDIT, id="edit-of-unchanged-pin-leaves-models"),
    pytest.param(fields.COMPARE_VIEW_EDIT, fields.COMPARE_VIEW_MODELS, id="models-leaves-edit"),
])
def test_a_comparison_of_the_other_view_goes_on(compare, running, sent):
    other = _running(compare, running)
    assert _ask(compare, **{fields.COMPARE_VIEW: sent})["pinned_salience"] is not None
    assert not other.should_stop(), other.check.reason


@pytest.mark.parametrize("view", [fields.COMPARE_VIEW_MODELS, fields.COMPARE_VIEW_EDIT])
def test_a_comparison_supersedes_its_clients_running_one_of_the_same_view(compare, view):
    older = _running(compare, view)
    _ask(compare, **{fields.COMPARE_VIEW: view})
    assert older.should_stop() and older.check.reason == cancel.SUPERSEDED


def test_without_the_field_a_comparison_is_compare_an_edits(compare):
    """Old clients and notebooks send no view: theirs is Compare an edit's (the compare wrapper's own use)."""
    models, edit = _running(compare, fields.COMPARE_VIEW_MODELS), _running(compare, fields.COMPARE_VIEW_EDIT)
    _ask(compare)
    assert edit.should_stop() and not models.should_stop()


@pytest.mark.parametrize("bad", ["itself", "Models", 3])
def test_an_unknown_view_is_refused_naming_the_field_and_the_views_before_any_work(compare, bad):
    running = _running(compare, fields.COMPARE_VIEW_EDIT)
    with pytest.raises(RequestError, match=fields.COMPARE_VIEW) as e:
        _ask(compare, **{fields.COMPARE_VIEW: bad})
    assert all(v in str(e.value) for v in fields.COMPARE_VIEWS), e.value  # a number too, not "must be a string"
    assert not running.should_stop()  # refused before its job was entered
