"""The body of an HTTP request, read with bounds: its size (413 beyond `--max_body_bytes`) and its JSON
(400 for non-JSON, nesting deeper than MAX_JSON_DEPTH, numbers longer than MAX_NUMBER_CHARS, NaN)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from lit_app.errors import Rejected, one_line

# JSON bodies: deepest nesting and longest number literal accepted (LIT's requests nest about 6 deep;
# beyond these Python's parser raises RecursionError / a digit-limit ValueError, which were 500s).
MAX_JSON_DEPTH = 64
MAX_NUMBER_CHARS = 40


def read_body(environ: dict[str, Any], max_bytes: int) -> bytes:
    """Reads the request body (Content-Length or chunked) and replaces wsgi.input with it.

    Raises:
      Rejected: 413 when the body is larger than `max_bytes`, 400 for a bad
        Content-Length or a malformed chunked body, 408 when the client stops sending.
    """
    raw_length = environ.get("CONTENT_LENGTH") or ""
    stream = environ["wsgi.input"]
    try:
        if raw_length.strip():
            try:
                length = int(raw_length)
            except ValueError:
                raise Rejected(400, f"Content-Length {raw_length!r} is not a number.") from None
            if length < 0:
                raise Rejected(400, f"Content-Length {raw_length!r} is negative.")
            if length > max_bytes:
                raise Rejected(413, f"The request body is {length:,} bytes; this server accepts up to"
                                    f" {max_bytes:,} (--max_body_bytes).")
            body = stream.read(length) if length else b""
            if len(body) < length:
                raise Rejected(400, f"The request body ended after {len(body):,} of {length:,} bytes.")
        elif environ.get("wsgi.input_terminated"):  # chunked: the server ends the stream
            body = stream.read(max_bytes + 1)
            if len(body) > max_bytes:
                raise Rejected(413, f"The request body is over {max_bytes:,} bytes; this server accepts up to"
                                    f" {max_bytes:,} (--max_body_bytes).")
        else:
            body = b""
    except (TimeoutError, ConnectionError) as e:
        raise Rejected(408, f"The request body did not arrive ({type(e).__name__}).") from None
    except OSError as e:  # werkzeug's chunked reader: "Invalid chunk header", "Negative chunk length not allowed"
        raise Rejected(400, f"The chunked request body is malformed ({one_line(str(e), 80)}). Fix: send each chunk"
                            " as its size in hex, CRLF, the bytes, CRLF, and end with 0 CRLF CRLF; or send a"
                            " Content-Length instead.") from None
    set_body(environ, body)
    return body


def set_body(environ: dict[str, Any], body: bytes) -> None:
    """Makes `body` the request body LIT reads."""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ.pop("wsgi.input_terminated", None)
    environ.pop("HTTP_TRANSFER_ENCODING", None)


def _number(text: str, kind: type) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        raise Rejected(400, f"The request body has a number of {len(text):,} characters; this server accepts"
                            f" numbers of up to {MAX_NUMBER_CHARS} characters.")
    return kind(text)


def _no_constant(name: str) -> Any:
    raise Rejected(400, f"The request body has {name}, which is not JSON; send a finite number.")


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: never recurses)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d <= MAX_JSON_DEPTH:
                stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_json(body: bytes) -> Any:
    """The JSON value of a request body (None when empty); 400 when it is not JSON, nests deeper
    than MAX_JSON_DEPTH, or has a number longer than MAX_NUMBER_CHARS, NaN or Infinity."""
    if not body.strip():
        return None
    deep = Rejected(400, f"The request body nests deeper than {MAX_JSON_DEPTH} levels; this server accepts up to"
                         f" {MAX_JSON_DEPTH}.")
    try:
        value = json.loads(body.decode("utf-8"), parse_int=lambda t: _number(t, int),
                           parse_float=lambda t: _number(t, float), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise Rejected(400, "The request body is not UTF-8 JSON.") from None
    except json.JSONDecodeError as e:
        raise Rejected(400, f"The request body is not valid JSON ({e.msg} at line {e.lineno},"
                            f" column {e.colno}).") from None
    except RecursionError:
        raise deep from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise deep
    return value


def json_text(text: str, error: Callable[[json.JSONDecodeError], Exception]) -> Any:
    """The JSON value of `text` (a field, a file's line); raises `error(why)` when it is not JSON, so that
    each caller names what was wrong where (`why.msg`, `why.colno`) and the fix."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(e) from None
