"""Every request/response field name the browser modules spell (`const X_FIELD = '...'` in
frontend/src) is one the server's LIT layer declares (a module constant of lit_app), so a
renamed field on either side fails here rather than as an empty module in the browser. Likewise the start of
the server's cancellation answers, which the browser keeps out of LIT's status bar."""

from __future__ import annotations

import importlib
import re

from lit_app.model import cancel
from lit_app.edge import clients
from lit_app import errors
from lit_app.schema import fields
from tests.frontend_source import SRC

LIT_MODULES = ("schema.fields", "wrappers.inside", "wrappers.explain", "wrappers.lit_convention", "schema.method_registry",
               "wrappers.compare", "schema.inputs")


def _frontend_fields() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.ts")):
        for name, value in re.findall(r"const ([A-Z_]+_FIELD)\s*=\s*'([^']*)'", path.read_text(encoding="utf-8")):
            found.setdefault(value, []).append(f"{path.relative_to(SRC)}:{name}")
    return found


def _server_names() -> set[str]:
    names: set[str] = set()
    for module in LIT_MODULES:
        mod = importlib.import_module(f"lit_app.{module}")
        names |= {v for k, v in vars(mod).items() if k.isupper() and isinstance(v, str)}
    return names


def test_every_field_the_browser_names_is_declared_by_the_server():
    frontend = _frontend_fields()
    assert {"salience", "old_answer", "pinned_prompt", "inside_trace"} <= set(frontend)  # the scan finds them
    unknown = {value: where for value, where in frontend.items() if value not in _server_names()}
    assert not unknown, f"field names the browser uses but lit_app does not declare: {unknown}"


def test_the_browser_spells_the_start_of_a_cancellation_answer_as_the_server():
    text = (SRC / "shared" / "request.ts").read_text(encoding="utf-8")
    spelled = re.findall(r"export const CANCELLED_PREFIX = '([^']*)';", text)
    assert spelled == [errors.CANCELLED_PREFIX], spelled
    check = cancel.Cancel("a test", lambda: cancel.SUPERSEDED)
    assert check() and str(check.error("it finished")).startswith(spelled[0] + " a newer selection")


def test_the_browser_spells_the_comparison_views_as_the_server():
    """The compare sections send their view (`compare_view`, lit_app/wrappers/compare.py): a value the server does not
    know is a 400, so each view the browser spells is one of fields.COMPARE_VIEWS, and each of those is spelled."""
    text = (SRC / "shared" / "fields.ts").read_text(encoding="utf-8")
    spelled = dict(re.findall(r"export const (COMPARE_VIEW_(?!FIELD)[A-Z]+) = '([^']*)';", text))
    assert spelled == {name: getattr(fields, name) for name in spelled} and len(spelled) == 2, spelled
    assert sorted(spelled.values()) == sorted(fields.COMPARE_VIEWS), spelled


def test_the_page_names_its_client_header_as_the_server_reads_it():
    """Work belongs to a client (issue 43): the request guard sends the header lit_app/edge/clients.py reads, with an id
    the server accepts."""
    text = (SRC / "request_guard.ts").read_text(encoding="utf-8")
    spelled = re.findall(r"export const CLIENT_HEADER = '([^']*)';", text)
    assert spelled == [clients.CLIENT_HEADER], spelled
    with clients.acting_as("0123456789abcdef0123456789abcdef"):  # newClientId()'s form: 32 hex digits
        assert clients.current() == "0123456789abcdef0123456789abcdef"


def test_the_page_spells_whose_work_a_waiting_job_waits_for_as_the_server():
    """Issue 43 (session 34): a waiting job's status says whose work goes first (lit_app/schema/fields.py
    WAITING_FOR); the page words each value, so both sides spell the key and its values alike."""
    text = (SRC / "shared" / "fields.ts").read_text(encoding="utf-8")
    spelled = {name: re.findall(rf"export const {name} = '([^']*)';", text)
               for name in ("WAITING_FOR_FIELD", "WAITING_OWN", "WAITING_OTHER")}
    assert spelled == {"WAITING_FOR_FIELD": [fields.WAITING_FOR], "WAITING_OWN": [fields.WAITING_OWN],
                       "WAITING_OTHER": [fields.WAITING_OTHER]}, spelled
    # A job taking turns with equal work says whose with the same values (issue 43, session 37).
    assert re.findall(r"export const SHARING_FIELD = '([^']*)';", text) == [fields.SHARING]
