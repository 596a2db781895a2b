"""The errors a request to the LIT server can end with, and the one-line form of their messages.

* `RequestError`: a model input the LIT wrappers cannot serve (every bad input, and every
  `SalienceError` of the core library, re-raised by `lit_app.wrappers.wrapper.Wrapper`). It is a
  `ValueError` whose message is one line: LIT's server turns it into HTTP 500 with body
  "Uncaught error: <message>\\n\\nDetails: <traceback>", which the middleware
  (lit_app/edge/security.py) answers as 400 (409 for a cancelled request), and LIT's client
  shows <message> only when it is a single line (otherwise "Unknown error").
* `Cancelled`: a request stopped because a newer one superseded it or nobody waits for it
  (lit_app/model/cancel.py); its message starts with "Cancelled:". Not a fault: the handlers answer it
  without LIT's traceback (`security.mark_client_errors`) and log one INFO line; 409 through the
  middleware.
* `ClientGone`: a `Cancelled` request whose HTTP client disconnected (nobody reads the answer).
* `ServerStopping`: a `Cancelled` request the server's stop ended (503, lit_app/server.py).
* `Rejected`: an HTTP request refused before it reaches LIT (lit_app/edge/security.py,
  lit_app/edge/limits.py, lit_app/edge/request_body.py, lit_app/edge/paths.py), with its status.
"""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 600


class RequestError(ValueError):
    """A request the wrappers cannot serve; the message is one line and names the fix.

    status: the HTTP status the middleware answers (400; 404 for a thing the request names that
    the server does not have; 403 for an endpoint this server has off; 503 the server too busy now).
    retry_after_s: with a 503, the Retry-After it sends (the page's request guard sends it again then); 0 none.
    """

    def __init__(self, message: str = "", status: int = 400, retry_after_s: int = 0):
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


# How every `Cancelled` message starts. The browser keeps these expected answers out of LIT's status bar
# (frontend/src/shared/request.ts `CANCELLED_PREFIX`, the same text: tests/unit/test_frontend_field_names.py).
CANCELLED_PREFIX = "Cancelled:"


class Cancelled(RequestError):
    """A request stopped because it was superseded or abandoned; the message starts with CANCELLED_PREFIX."""


class ClientGone(Cancelled):
    """A request stopped because its HTTP client disconnected: nobody reads the answer."""


class ServerStopping(Cancelled):
    """A request stopped because the server is stopping (Ctrl-C, SIGTERM): answered 503, not 409 (its message
    does not start with CANCELLED_PREFIX: nothing the client did stopped it) and never as an empty success."""

    def __init__(self, message: str = "The server is stopping; this request was stopped before it finished. Fix:"
                                      " send it again once the server is back."):
        super().__init__(message, status=503)


class Rejected(Exception):
    """An HTTP request refused before it reaches LIT: status, one-line message, extra headers."""

    def __init__(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def one_line(text: str, limit: int | None = MAX_MESSAGE_CHARS) -> str:
    """Text collapsed to one line of at most `limit` characters (None: any length)."""
    line = re.sub(r"\s*[\r\n]+\s*", " ", text).strip()
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


PROMPT_START_CHARS = 40


def prompt_start(text: object) -> str:
    """The start of a prompt, quoted, as the server's log lines name a request ("which of several requests
    stopped"): one line of at most PROMPT_START_CHARS characters; "none" when `text` is not a string."""
    if not isinstance(text, str):
        return "none"
    return repr(one_line(text, limit=PROMPT_START_CHARS))
