"""How a browser may keep the page and its scripts: a strong ETag, `Cache-Control: no-cache`, 304 when unchanged.

LIT answers every static file (index.html, its 2 MB main.js, our bundle, the fonts) with `Cache-Control: private,
max-age=3600` and no validator: for an hour a browser ran the scripts it had kept without asking, so a server
restarted on a new build (`npm run build`, an upgrade) served its old page and bundle to an open profile, and after
the hour the browser fetched every file whole again. Here a static file's answer names its content (`ETag`, a hash
of the body) and asks the browser to check it on each load (`no-cache`); the browser sends the tag back
(`If-None-Match`) and an unchanged file is answered 304 without its body, so the browser keeps its copy and V8's
compiled code for it (docs/benchmarks.md, "Session 40 (h5)"). `SecureApp` applies it to the GET and HEAD answers of
pages and files, never to the API's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

_REPLACED = {"cache-control", "expires", "etag"}
# Headers that describe a body: a 304 has none (RFC 9110 15.4.5 keeps only the validators and caching headers).
_BODY_HEADERS = {"content-length", "content-type", "content-encoding"}


def etag(body: bytes) -> str:
    """The strong entity tag of `body`: a quoted prefix of its SHA-256."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def matches(if_none_match: str, tag: str) -> bool:
    """True when an `If-None-Match` header names `tag` (weak comparison, RFC 9110 13.1.2) or is `*`."""
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == tag:
            return True
    return False


def revalidated(environ: dict, status: str, headers: Iterable[tuple[str, str]], body: list[bytes]
                ) -> tuple[str, list[tuple[str, str]], list[bytes]]:
    """(status, headers, body) of a static file's 200 answer with its ETag and `no-cache`, or 304 without the body
    when the request's `If-None-Match` names that tag. A HEAD answer (no body to hash) only loses LIT's hour of
    freshness; any other status is returned unchanged."""
    if not status.startswith("200"):
        return status, list(headers), body
    kept = [(k, v) for k, v in headers if k.lower() not in _REPLACED]
    if environ.get("REQUEST_METHOD", "GET").upper() != "GET":
        return status, kept + [("Cache-Control", "no-cache")], body
    tag = etag(b"".join(body))
    kept += [("Cache-Control", "no-cache"), ("ETag", tag)]
    if matches(environ.get("HTTP_IF_NONE_MATCH", ""), tag):
        return "304 Not Modified", [(k, v) for k, v in kept if k.lower() not in _BODY_HEADERS], []
    return status, kept, body
