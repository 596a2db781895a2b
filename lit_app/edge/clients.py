"""Which client a request comes from: the page's client id, so that work belongs to the client that asked.

The page (one id per page load: frontend/src/request_guard.ts) sends the header `CLIENT_HEADER` with
every POST. The server keeps one notion of "latest" per client: a newer selection of a client
supersedes that client's older work only (a span request, a segment or matrix job, an explanation test,
an intervention run), never another client's (lit_app/model/cancel.py, progressive.py, user_jobs.py). A
request without an id (a script, a notebook's own HTTP calls) is `ANONYMOUS`: it supersedes nothing
and nothing supersedes it; it stops when its HTTP client disconnects or stops polling.

`serving(environ)` remembers the request's id while the app serves it (lit_app/server.py and
lit_app/plugin.py enter it with lit_app/edge/disconnect.py's); `current()` reads it on that thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator, Mapping
from typing import Any

from lit_app.errors import RequestError

CLIENT_HEADER = "X-Sequence-Salience-Client"
_ENVIRON_KEY = "HTTP_" + CLIENT_HEADER.upper().replace("-", "_")
# A request without a client id.
ANONYMOUS = ""
MAX_ID_CHARS = 64
_ID = re.compile(r"[A-Za-z0-9_-]{1,%d}" % MAX_ID_CHARS)

# The id of the request this thread serves, or a malformed header's value (quoted in the error).
_CLIENT: contextvars.ContextVar[tuple[str, bool]] = contextvars.ContextVar("sequence_salience_client",
                                                                           default=(ANONYMOUS, True))


@contextlib.contextmanager
def serving(environ: Mapping[str, Any]) -> Iterator[None]:
    """Remembers the request's client id (header `CLIENT_HEADER`) for `current` while the app serves it."""
    raw = str(environ.get(_ENVIRON_KEY, "")).strip()
    token = _CLIENT.set((raw, not raw or _ID.fullmatch(raw) is not None))
    try:
        yield
    finally:
        _CLIENT.reset(token)


@contextlib.contextmanager
def acting_as(client: str) -> Iterator[None]:
    """Runs the block as a request of `client` (tests, and code that serves a request on another thread)."""
    token = _CLIENT.set((client, client == ANONYMOUS or _ID.fullmatch(client) is not None))
    try:
        yield
    finally:
        _CLIENT.reset(token)


def current() -> str:
    """The client id of the request this thread serves; `ANONYMOUS` ("") without one.

    Raises:
      RequestError: the header is not 1 to 64 letters, digits, "-" or "_".
    """
    value, valid = _CLIENT.get()
    if not valid:
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise RequestError(f"Header {CLIENT_HEADER} is {shown!r}; use 1 to {MAX_ID_CHARS} letters, digits, '-' or"
                           " '_' (one id per page load), or leave the header out.")
    return value
