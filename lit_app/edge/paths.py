"""The paths a request names: its URL route (served only in canonical form, classified by the route LIT
itself dispatches to) and the server file paths of LIT's file endpoints (confined to --data_dir)."""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any

from werkzeug import wrappers as wz_wrappers

from lit_app.errors import Rejected

# LIT appends these to a save/load path (lit_nlp.api.dataset.LIT_FILE_EXTENSION / LIT_SPEC_EXTENSION).
_LIT_SUFFIXES = ("", ".lit.jsonl", ".lit.jsonl.spec", ".spec")

# One path segment of a canonical path: every LIT route and every file of the client root is
# spelled with these characters, and no segment starts with "." (no ".", "..", hidden files).
_SEGMENT = r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*"
_CANONICAL_PATH = re.compile(rf"/|(/{_SEGMENT})+")
_SHOWN_PATH_CHARS = 120


def lit_route(environ: dict[str, Any]) -> str:
    """The route LIT 1.3.1 dispatches `environ` to ("" for the index page).

    The same parse as `lit_nlp.lib.wsgi_app.App.__call__`: werkzeug's `Request.path`
    (PATH_INFO, already percent-decoded, leading slashes merged), then
    `urlparse(path).path` (which drops `;params`, `?...` and `#...`), minus one
    trailing slash.
    """
    path = urllib.parse.urlparse(wz_wrappers.Request(environ).path).path
    return path[:-1] if path.endswith("/") else path


def canonical_route(environ: dict[str, Any]) -> str:
    """The route of a request whose path is in canonical form; Rejected(400) for any other spelling.

    Canonical: the path as sent on the request line (RAW_URI, before "?") equals
    the decoded PATH_INFO and LIT's route for it (`lit_route`; "/" for the index),
    and is made of "/"-separated segments of letters, digits and `._~-` that do
    not start with ".". Refused therefore: `;params`, any %-escape (`%2F`, `%3B`,
    `%2E`, ...), repeated or trailing slashes, `.` and `..` segments, backslashes,
    absolute-form targets (`http://host/...`), fragments, non-ASCII. An accepted
    request is classified (API or static) by the very route LIT will run.
    """
    decoded = environ.get("PATH_INFO", "") or "/"
    raw_target = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    sent = raw_target.split("?", 1)[0] if raw_target is not None else decoded
    route = lit_route(environ)
    canonical = route or "/"
    if sent == decoded == canonical and _CANONICAL_PATH.fullmatch(sent):
        return route
    shown = sent if len(sent) <= _SHOWN_PATH_CHARS else sent[:_SHOWN_PATH_CHARS] + "..."
    fix = f" Fix: request {canonical!r}." if _CANONICAL_PATH.fullmatch(canonical) else ""
    raise Rejected(400, f"The path {shown!r} is not in canonical form: no ';' parameters, '%' escapes, '//',"
                        f" '.' or '..' segments, trailing '/', or characters other than letters, digits and"
                        f" '._~-'.{fix}")


# ---------------------------------------------------------------------------
# File paths.


class PathConfiner:
    """Maps client-given paths into one folder, refusing `..` and symlinks that lead out."""

    def __init__(self, root: str):
        self.root = os.path.realpath(root)

    def _inside(self, path: str) -> bool:
        return os.path.commonpath([self.root, path]) == self.root

    def resolve(self, given: Any, what: str = "path") -> str:
        """The real path inside the folder for `given` (relative: taken inside it). Raises Rejected(403)."""
        if not isinstance(given, str) or not given.strip():
            raise Rejected(400, f"The {what} must be a non-empty string.")
        if "\x00" in given:
            raise Rejected(403, f"The {what} contains a NUL character.")
        parts = re.split(r"[\\/]+", given)
        if ".." in parts:
            raise Rejected(403, f"The {what} {given!r} contains '..'; give a path inside --data_dir.")
        joined = given if os.path.isabs(given) else os.path.join(self.root, given)
        resolved = os.path.realpath(joined)
        for suffix in _LIT_SUFFIXES:  # LIT reads/writes the path and these siblings
            if not self._inside(os.path.realpath(resolved + suffix)):
                raise Rejected(403, f"The {what} {given!r} leads outside --data_dir (through a symlink or an"
                                    " absolute path); give a path inside it.")
        return resolved

