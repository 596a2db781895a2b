"""The client-side half of the server's request rules: `request_guard.js`, a fetch wrapper the client
root loads before LIT's main.js (lit_app/serving/client_build.py copies it next to index.html).

LIT's client POSTs JSON without a Content-Type, which the middleware (lit_app/edge/security.py)
refuses; the guard adds the header to same-origin POSTs, retries a 503 after its Retry-After,
and appends "Details" to one-line error bodies so that LIT's status bar shows the message.

Its source is TypeScript, frontend/src/request_guard.ts (tested by frontend/test/
request_guard.test.ts), built by `npm run build` with the bundle into frontend/dist/
request_guard.js; a wheel carries the built file as package data (lit_app/serving/assets.py gathers every
built script). Only `REQUEST_GUARD_NAME` (its file name in the client root) and the built text
(`request_guard_js()`, also readable as `REQUEST_GUARD_JS`) are read, by client_build.py.
"""

from __future__ import annotations

import os

from lit_app.serving import assets

REQUEST_GUARD_NAME = "request_guard.js"


def request_guard_path() -> str:
    """Where the built guard is: the checkout's frontend/dist, else the installed package data."""
    return os.path.join(assets.find().dist_dir or assets.PACKAGED_DIR, REQUEST_GUARD_NAME)


def request_guard_js() -> str:
    """The built guard's text.

    Raises FileNotFoundError naming the file and the fix when it is not built: without it every
    POST of LIT's page lacks the JSON Content-Type and is refused, so the page cannot work.
    """
    path = request_guard_path()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"The request guard {path} is not built; LIT's page needs it to talk to this server."
            " Fix: cd frontend && npm run build (or make frontend).") from None


def __getattr__(name: str) -> str:
    if name == "REQUEST_GUARD_JS":  # the built text, read when asked (it changes with every build)
        return request_guard_js()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
