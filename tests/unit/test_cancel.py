"""The cancel checks of lit_app/model/cancel.py and the user jobs built on them (no model, no server).

The disconnect itself is checked on a real socket pair: `client_gone` is bound to the socket of the
request a thread serves (`disconnect.serving`), and says gone once the peer closes it.
"""

from __future__ import annotations

import socket

import pytest

from lit_app.model import cancel, progressive, user_jobs
from lit_app.edge import clients, disconnect
from lit_app.errors import Cancelled, ClientGone, RequestError
from lit_app.schema import fields


def test_the_first_reason_that_fires_is_latched():
    fired = {"a": "", "b": ""}
    check = cancel.Cancel("work", lambda: fired["a"], lambda: fired["b"])
    assert not check() and check.reason == ""
    fired["b"] = "b went"
    assert check() and check.reason == "b went"
    fired["a"], fired["b"] = "a went", ""
    assert check() and check.reason == "b went"  # latched: the first reason stays


def test_a_newer_request_of_the_same_key_supersedes_only_its_own_key():
    latest = cancel.Latest()
    old_a = latest.take("a")
    b = latest.take("b")
    assert old_a() == "" and b() == ""
    new_a = latest.take("a")
    assert old_a() == cancel.SUPERSEDED and new_a() == "" and b() == ""


def test_the_oldest_keys_are_forgotten_and_read_as_superseded():
    latest = cancel.Latest(keep=2)
    first = latest.take(1)
    latest.take(2)
    latest.take(3)
    assert first() == cancel.SUPERSEDED


def _after(jobs: progressive.DetailJobs, check, *selections: tuple[str, str]) -> str:
    """`check()` once each (datapoint, client) of `selections` was selected in turn."""
    for datapoint, client in selections:
        jobs.focus(datapoint, client)
    return check()


def test_focus_moved_fires_only_for_another_datapoint_selected_after_the_call():
    jobs = progressive.DetailJobs()
    jobs.focus("A", "page")
    on_b = cancel.focus_moved(jobs, "B", "page")  # a request for B while the page looks at A
    assert _after(jobs, on_b, ("A", "page")) == ""
    assert _after(jobs, on_b, ("B", "page")) == ""  # the page selects B: still wanted
    assert _after(jobs, on_b, ("C", "page")) == cancel.FOCUS_MOVED
    on_a = cancel.focus_moved(jobs, "A", "page")
    assert _after(jobs, on_a, ("A", "page"), ("C", "page"), ("A", "page")) == ""  # away and back: A is on screen again


def test_focus_moved_follows_its_own_client_only():
    """Issue 43: a second client's selection of another prompt cancelled the first client's requests."""
    jobs = progressive.DetailJobs()
    jobs.focus("A", "tab-1")
    on_a = cancel.focus_moved(jobs, "A", "tab-1")
    # another tab selects B; a request without a client id selects nothing
    assert _after(jobs, on_a, ("B", "tab-2"), ("C", "")) == ""
    assert _after(jobs, on_a, ("B", "tab-1")) == cancel.FOCUS_MOVED
    anonymous = cancel.focus_moved(jobs, "A", "")
    assert _after(jobs, anonymous, ("Z", "tab-1"), ("Y", "tab-2")) == ""  # a request without an id is superseded by nobody


def test_client_gone_follows_the_socket_of_the_request_this_thread_serves():
    server_side, client_side = socket.socketpair()
    try:
        with disconnect.serving({"werkzeug.socket": server_side}):
            check = cancel.for_request("a test request")
        assert not check()
        client_side.close()
        assert check() and check.client_gone
        assert isinstance(check.error("it finished"), ClientGone)
    finally:
        server_side.close()


def test_without_a_socket_the_client_is_never_gone():
    check = cancel.for_request("a test request")
    assert not check()
    check.stop("told to")
    error = check.error("it finished")
    assert check() and type(error) is Cancelled and str(error).startswith("Cancelled: told to before it finished.")


def test_a_span_or_comparison_stopped_partway_says_how_far_it_got():
    """The one 409 text of a superseded span (lit_app/wrappers/salience.py) and comparison (compare.py): the browser
    and tests/integration/test_compare_superseded.py read it; without a count when nothing was counted yet."""
    check = cancel.Cancel("a span", lambda: cancel.SUPERSEDED)
    assert check()
    error = check.stopped_after(3, 8, "SmoothGrad samples")
    assert type(error) is Cancelled and str(error) == (
        "Cancelled: a newer selection replaced this request. It stopped after 3 of 8 SmoothGrad samples.")
    assert str(check.stopped_after(0, 0, "IG steps")) == "Cancelled: a newer selection replaced this request."


@pytest.mark.parametrize("how", ["newer job", "cancel request", "client gone"])
def test_a_user_job_stops_when_superseded_cancelled_or_its_client_goes(how):
    slot = user_jobs.JobSlot()
    server_side, client_side = socket.socketpair()
    try:
        with disconnect.serving({"werkzeug.socket": server_side}), clients.acting_as("page"):
            job = slot.start("curves", "k")
        with clients.acting_as("page"):
            assert not job.should_stop() and slot.status()["cancelled"] is False
            if how == "newer job":
                slot.start("reduce", "k2")
                reason = user_jobs.NEWER_JOB
            elif how == "cancel request":
                assert slot.poll_answer("cancel") == {"action": "cancel", "cancelled": True}
                reason = user_jobs.CANCEL_REQUEST
            else:
                client_side.close()
                reason = cancel.CLIENT_GONE
        assert job.should_stop() and job.check.reason == reason and job.status()["cancelled"] is True
    finally:
        server_side.close()
        client_side.close()


def test_a_user_job_belongs_to_its_client():
    """Issue 43: another client's job (a second tab, a notebook) must not stop this client's, and a request without
    a client id supersedes nothing; status and cancel read the asking client's job only."""
    slot = user_jobs.JobSlot()
    with clients.acting_as("tab-1"):
        mine = slot.start("curves", "k")
    with clients.acting_as("tab-2"):
        theirs = slot.start("curves", "k")
        assert slot.poll_answer("cancel") == {"action": "cancel", "cancelled": True}
    anonymous = slot.start("reduce", "k")
    slot.start("reduce", "k2")  # a second request without an id: the first goes on
    assert theirs.should_stop() and not mine.should_stop() and not anonymous.should_stop()
    with clients.acting_as("tab-1"):
        assert slot.status()["action"] == "curves" and slot.status()["cancelled"] is False
        slot.start("reduce", "k3")  # tab-1's newer job supersedes tab-1's older one
    assert mine.should_stop() and mine.check.reason == user_jobs.NEWER_JOB and not anonymous.should_stop()


def test_a_user_job_of_a_view_supersedes_its_clients_job_of_that_view_only():
    """A comparison (lit_app/wrappers/compare.py) of one view (`compare_view`: Compare models' or Compare an edit's)
    stops its client's older one of that view, saying why as a superseded span does; not the other view's, not
    another client's, not a job without a view, and not one started with supersede=False."""
    slot = user_jobs.JobSlot()
    with clients.acting_as("tab-1"):
        plain = slot.start("curves", "k")
        side_by_side = slot.start("comparison", "k", supersede=False)
        itself = slot.start("comparison", "sg8", view=fields.COMPARE_VIEW_MODELS, why=cancel.SUPERSEDED)
        pinned = slot.start("comparison", "sg8", view=fields.COMPARE_VIEW_EDIT, why=cancel.SUPERSEDED)
    with clients.acting_as("tab-2"):
        slot.start("comparison", "sg4", view=fields.COMPARE_VIEW_MODELS, why=cancel.SUPERSEDED)
    assert not any(j.should_stop() for j in (plain, side_by_side, itself, pinned))
    with clients.acting_as("tab-1"):
        newer = slot.start("comparison", "sg4", view=fields.COMPARE_VIEW_MODELS, why=cancel.SUPERSEDED)
        assert slot.status()["action"] == "curves"  # status reads the job started without a view
    assert itself.should_stop() and itself.check.reason == cancel.SUPERSEDED
    assert not any(j.should_stop() for j in (plain, side_by_side, pinned, newer))


def test_a_log_line_names_its_request_by_the_start_of_its_prompt():
    from lit_app.errors import PROMPT_START_CHARS, prompt_start

    assert prompt_start("What is the capital of France?") == "'What is the capital of France?'"
    # One line (line breaks and the spaces around them become one space), cut to PROMPT_START_CHARS with "…".
    assert prompt_start("Two lines:\n  the second") == "'Two lines: the second'"
    long = "x" * 100
    assert prompt_start(long) == repr("x" * (PROMPT_START_CHARS - 1) + "…")
    assert prompt_start(None) == "none" and prompt_start(["a"]) == "none"


def test_a_malformed_client_id_is_a_request_error_naming_the_header():
    with clients.serving({"HTTP_X_SEQUENCE_SALIENCE_CLIENT": "tab 1; drop"}):
        with pytest.raises(RequestError, match="X-Sequence-Salience-Client") as e:
            clients.current()
    assert "'tab 1; drop'" in str(e.value) and "leave the header out" in str(e.value)
    with clients.serving({}):
        assert clients.current() == clients.ANONYMOUS
    with clients.serving({"HTTP_X_SEQUENCE_SALIENCE_CLIENT": "tab-1"}):
        assert clients.current() == "tab-1"
