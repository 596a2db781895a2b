"""Only the user's own browser tab can drive the LIT server: WSGI middleware around LIT's app.

`SecureApp(app, SecurityConfig(...))` applies these rules to every request, in
this order, before LIT sees it (LIT 1.3.1 itself checks none of them):

1. Host: the Host header must name the bound address, `localhost`,
   `127.0.0.1` or `[::1]` with the server's port, or a name given with
   `--allowed_hosts` (any IP literal too when bound to 0.0.0.0 / ::, since an
   IP cannot be DNS-rebound). Else 403. This stops DNS rebinding: a web page
   whose domain re-resolves to 127.0.0.1 still sends its own name as Host.
   Path: only a canonical spelling is served (`canonical_route`), else 400; the
   request is classified (API endpoint or page) by the route LIT itself will
   dispatch it to, so `/get_info;x`, `//get_info`, `/get%5Finfo` and the like
   never pass as pages while LIT runs the endpoint.
2. Token: the server has one on every bind by default (generated at start and
   printed in the URL, like Jupyter's; `--no_token` opts out on loopback only),
   and a request must carry it as `?token=`, `Authorization: token <t>` (or
   `Bearer <t>`) or the HttpOnly SameSite=Strict cookie a `?token=` page load
   sets. Else 403. On a shared machine any local user can reach loopback.
3. Methods: LIT's API endpoints take POST only, pages and static files
   GET/HEAD only (405). Every POST needs `Content-Type: application/json`, an
   `Origin` (when present) equal to the server's own origin, and no
   cross-site `Sec-Fetch-Site`. Else 403. A cross-site form or `text/plain`
   fetch therefore never reaches LIT, and a cross-site JSON fetch needs a CORS
   preflight that this server never grants.
4. File paths: `/create_dataset`, `/create_model`, `/save_datapoints` and
   `/load_datapoints` take server paths from the client; they are off (403)
   unless the server has a `--data_dir`, and then every path is confined to it
   (no `..`, no symlink leading out; relative paths are taken inside it).
5. Limits (`lit_app.edge.limits`): body size (413), JSON and input checks (400),
   a bounded number of compute requests at once (503 + Retry-After); requests
   that never need the model (LIT's metadata, progress polls, the tokenizer
   model) are not counted, so they are answered while the queue is full.
6. Errors: every error body is one line of text; LIT's "Uncaught error: ...
   Details: <traceback>" bodies are cut to the message and the traceback is
   logged on the server. The client's mistakes are 4xx on every route, LIT's
   own included (lit_app/edge/lit_routes.py: LIT-encoded JSON objects and create
   configs checked before LIT runs; LIT's own request checks rewritten with the
   field and the fix), never 500.
7. Caching: a page or static file's 200 carries its ETag and `no-cache`, and a
   current copy is answered 304 (lit_app/edge/static_cache.py: LIT's own hour
   without a validator ran an old bundle after a restart on a new build).

LIT's own client sends POST bodies without a Content-Type; the client root
loads the request guard (lit_app/serving/request_guard.py) before LIT's main.js, which
adds the header to same-origin POSTs, retries 503 answers after Retry-After,
and appends "Details" to one-line error bodies so that LIT's status bar shows
the message instead of "Unknown error".

This module is the middleware; the pieces it applies live in their own rooms:
hosts.py (Host parsing), tokens.py (the token, log redaction), paths.py
(canonical routes, --data_dir confinement), request_body.py (body size, JSON),
limits.py (input checks, compute slots), security_config.py (`SecurityConfig`
and the flags). The HTTP server itself (connections, timeouts) is http_server.py.
"""

from __future__ import annotations

import functools
import hmac
import http
import json
import logging
import os
import re
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from werkzeug import http as wz_http

from lit_app.edge import limits as limits_lib, lit_routes, request_body, static_cache
from lit_app import memory
from lit_app.errors import CANCELLED_PREFIX, Cancelled, Rejected, RequestError, one_line
from lit_app.edge.hosts import LOOPBACK_NAMES, is_ip, is_wildcard, parse_host
from lit_app.edge.paths import PathConfiner, canonical_route
from lit_app.edge.security_config import SecurityConfig
from lit_app.edge.tokens import TOKEN_PARAM, redact

logger = logging.getLogger("lit_app.edge.security")

FILE_PATH_ENDPOINTS = frozenset({"/create_dataset", "/create_model", "/save_datapoints", "/load_datapoints"})
# Config keys of /create_dataset and /create_model that hold server paths.
_PATH_KEY = re.compile(r"(path|file|dir|directory|filename)$", re.IGNORECASE)
# WSGI environ key where lit_app.server's handlers leave a client-mistake exception (lit_app.errors.RequestError):
# LIT answers it with 500; the middleware answers 400 (409 for a request a newer one cancelled).
CLIENT_ERROR_KEY = "sequence_salience.client_error"


def mark_client_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """A LIT handler `(app, request, environ)` that leaves a `RequestError` under `CLIENT_ERROR_KEY`.

    LIT still answers the error as "Uncaught error: ..." with status 500 (the bare app behaves as
    LIT does); `SecureApp` reads the mark and answers 400 (409 for a request a newer one cancelled).
    Used by our app (lit_app/server.py) and, for a LIT user's own `LitApp`, by `lit_app.plugin.adapt`.

    A `Cancelled` request (superseded, or its client gone: lit_app/model/cancel.py) is no fault: it is
    answered here with LIT's error body and status (500; the middleware's 409), without LIT's
    ERROR log and traceback (the wrapper logs it as one INFO line).
    """
    if getattr(handler, "marks_client_errors", False):
        return handler

    @functools.wraps(handler)
    def marked(app, request, environ):
        try:
            return handler(app, request, environ)
        except Cancelled as e:  # the wrapper logged it (lit_app/wrappers/wrapper.py)
            environ[CLIENT_ERROR_KEY] = e
            return app.respond(request, f"Uncaught error: {one_line(str(e))}", "text/plain", 500)
        except RequestError as e:
            environ[CLIENT_ERROR_KEY] = e
            raise

    marked.marks_client_errors = True
    return marked


# LIT 1.3.1's own checks of missing request parameters (ValueError -> 500 in LIT): client mistakes.
_LIT_PARAMETER_ERRORS = re.compile(r"^(Must provide a |No config specified|No base model specified|Unknown or missing"
                                   r" name )")
# Absolute server paths in an error message (two or more segments), replaced before it leaves the server.
_SERVER_PATH = re.compile(r"(?<![\w:/.~-])(/[\w.~+@-]+){2,}/?")
_SAFE_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "SAMEORIGIN"),
    ("Referrer-Policy", "no-referrer"),
)


# ---------------------------------------------------------------------------
# Responses.


def lit_error_message(body: str) -> tuple[str, str]:
    """(one-line message, details) of a LIT error body ("Uncaught error: <m>\\n\\nDetails: <traceback>")."""
    details = ""
    if "\n\nDetails:" in body:
        body, details = body.split("\n\nDetails:", 1)
    body = re.sub(r"^\s*Uncaught error:\s*", "", body)
    message = one_line(body) or "The server failed without a message"
    if re.fullmatch(r"'[^']*'", message):  # LIT's bare KeyError
        message = (f"Unknown or missing name {message} in the request. Fix: use a name that /get_info lists"
                   " (models, datasets, generators, interpreters, metrics).")
    return message, details.strip()


def _status_line(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _not_lits_uncaught_error(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Uncaught error:")


def quiet_lit_error_log() -> None:
    """Drops LIT's own log of every exception ("Uncaught error: <message> <traceback>", lit_nlp's WSGI app,
    through absl's logger): `SecureApp` logs each one itself, one line for a client's mistake and with
    the traceback for a server fault."""
    absl_logger = logging.getLogger("absl")
    if _not_lits_uncaught_error not in absl_logger.filters:
        absl_logger.addFilter(_not_lits_uncaught_error)


# ---------------------------------------------------------------------------
# The middleware.


class SecureApp:
    """WSGI middleware applying the rules of this module's docstring to a LIT app.

    Attributes:
      slots: the bounded compute-request counter (`limits.ComputeSlots`).
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        config: SecurityConfig,
        model_names: Callable[[], Collection[str]] | None = None,
        dataset_names: Callable[[], Collection[str]] | None = None,
        api_paths: Collection[str] = limits_lib.API_PATHS,
        model_free_names: Callable[[], Collection[str]] | None = None,
    ):
        """Args:
          app: the LIT WSGI app.
          config: what to allow.
          model_names, dataset_names: callables naming the app's models and
            datasets, for clear 400s on unknown names; default: the app's
            `model_names()` / `dataset_names()` methods when it has them.
          api_paths: the app's API routes (LIT's handler paths); every other
            route is a page or static file.
          model_free_names: a callable naming the models that never wait for the
            loaded model (the tokenizer); their /get_preds requests are not
            counted against `max_pending`. Default: the app's `model_free_names()`.
        """
        self.app = app
        self.config = config
        self.limits = config.limits
        self.model_names = model_names or getattr(app, "model_names", None)
        self.dataset_names = dataset_names or getattr(app, "dataset_names", None)
        self.example_ids = getattr(app, "example_ids", None)
        self.model_free_names = model_free_names or getattr(app, "model_free_names", None)
        self.paths = PathConfiner(config.data_dir) if config.data_dir else None
        publish = getattr(app, "publish_limits", None)  # the browser checks what it can before sending
        if callable(publish):
            publish(config.limits)
        self.slots = limits_lib.ComputeSlots(config.limits.max_pending)
        self.api_paths = api_paths
        self._allowed = self._allowed_hosts()
        quiet_lit_error_log()

    # -- checks ------------------------------------------------------------

    def _allowed_hosts(self) -> tuple[set[tuple[str, int]], set[str], bool]:
        exact = {(n, self.config.port) for n in LOOPBACK_NAMES}
        if not is_wildcard(self.config.host):
            exact.add((self.config.host.strip("[]").lower().rstrip("."), self.config.port))
        any_port: set[str] = set()
        allow_all = False
        for entry in self.config.allowed_hosts:
            if entry == "*":
                allow_all = True
                continue
            has_port = bool(re.search(r"(^\[.*\]:\d+$)|(^[^:\[\]]+:\d+$)", entry))
            parsed = parse_host(entry, self.config.port)
            if parsed is None:
                continue
            if has_port:
                exact.add(parsed)
            else:
                any_port.add(parsed[0])
        return exact, any_port, allow_all

    def _check_host(self, environ: dict[str, Any]) -> str:
        raw = environ.get("HTTP_HOST", "")
        exact, any_port, allow_all = self._allowed
        default_port = 443 if environ.get("wsgi.url_scheme") == "https" else 80
        parsed = parse_host(raw, default_port)
        if allow_all and parsed is not None:
            return raw
        if parsed is not None and (
            parsed in exact
            or parsed[0] in any_port
            or (is_wildcard(self.config.host) and is_ip(parsed[0]) and parsed[1] == self.config.port)
        ):
            return raw
        raise Rejected(403, f"Host {raw!r} is not allowed; open http://127.0.0.1:{self.config.port}/ or start the"
                            " server with --allowed_hosts NAME.")

    def _check_token(self, environ: dict[str, Any], query: dict[str, str]) -> str | None:
        """Returns how the token came ("query", "header", "cookie") or None when there is no token."""
        token = self.config.token
        if not token:
            return None
        candidates = []
        if TOKEN_PARAM in query:
            candidates.append(("query", query[TOKEN_PARAM]))
        auth = environ.get("HTTP_AUTHORIZATION", "")
        m = re.fullmatch(r"\s*(?:token|bearer)\s+(\S+)\s*", auth, re.IGNORECASE)
        if m:
            candidates.append(("header", m.group(1)))
        cookie = wz_http.parse_cookie(environ).get(self.config.cookie_name)
        if cookie:
            candidates.append(("cookie", cookie))
        for source, value in candidates:
            if hmac.compare_digest(value.encode("utf-8", "replace"), token.encode("utf-8")):
                return source
        if candidates:
            raise Rejected(403, "Wrong token. Fix: open the URL with ?token= that the server printed at start.")
        raise Rejected(403, "This server needs a token. Fix: open the URL with ?token= that the server printed"
                            " at start.")

    def _check_post(self, environ: dict[str, Any], host: str) -> None:
        ctype = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            raise Rejected(403, f"POST requests need Content-Type application/json, got {ctype or 'none'!r}.")
        origin = environ.get("HTTP_ORIGIN")
        scheme = environ.get("wsgi.url_scheme", "http")
        if origin is not None and origin.rstrip("/").lower() != f"{scheme}://{host}".lower():
            raise Rejected(403, f"Origin {origin!r} is not this server's origin ({scheme}://{host}).")
        site = environ.get("HTTP_SEC_FETCH_SITE")
        if site is not None and site.lower() not in ("same-origin", "none"):
            raise Rejected(403, f"Cross-site request refused (Sec-Fetch-Site: {site}).")

    def _confine(self, path: str, query: dict[str, str], data: Any) -> tuple[dict[str, str], Any]:
        """Query and body with every client path replaced by its real path inside --data_dir."""
        if self.paths is None:
            raise Rejected(403, f"{path} reads or writes server files and is off. Fix: start the server with"
                                " --data_dir DIR to allow files inside DIR.")
        if path in ("/save_datapoints", "/load_datapoints"):
            if "path" not in query:
                raise Rejected(400, f"{path} needs ?path= (a file inside --data_dir).")
            query = dict(query, path=self.paths.resolve(query["path"]))
        else:
            config = data.get("config") if isinstance(data, dict) else None
            if isinstance(config, dict):
                config = dict(config)
                for key, value in config.items():
                    if not _PATH_KEY.search(key):
                        continue
                    if not isinstance(value, str) or not value:  # an int would name an open file descriptor
                        raise Rejected(400, f'config "{key}" is {type(value).__name__} {str(value)[:40]!r}; use a'
                                            " non-empty string naming a file inside --data_dir.")
                    config[key] = self.paths.resolve(value, f'config "{key}"')
                data = dict(data, config=config)
        return query, data

    # -- WSGI --------------------------------------------------------------

    def public_message(self, message: str) -> str:
        """`message` without server paths: inside --data_dir relative to it, any other one as <server path>."""
        root = self.config.data_dir

        def one(m: re.Match) -> str:
            path = m.group(0)
            if root and os.path.commonpath([root, os.path.normpath(path)]) == root:
                return os.path.relpath(path, root)
            return "<server path>"

        return _SERVER_PATH.sub(one, message)

    def _reject(self, environ: dict[str, Any], start_response: Callable[..., Any], err: Rejected) -> list[bytes]:
        logger.warning("%s %s %s -> %d: %s", environ.get("REMOTE_ADDR", "?"), environ.get("REQUEST_METHOD"),
                       redact(environ.get("PATH_INFO", "")), err.status, redact(err.message))
        return self._error(start_response, err.status, err.message, err.headers, close=True)

    def _error(self, start_response: Callable[..., Any], status: int, message: str,
               headers: Sequence[tuple[str, str]] = (), close: bool = False) -> list[bytes]:
        body = one_line(message).encode("utf-8")
        hdrs = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"), *_SAFE_HEADERS, *headers]
        if close:  # the body may be unread: do not reuse the connection
            hdrs.append(("Connection", "close"))
        start_response(_status_line(status), hdrs)
        return [body]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            return self._handle(environ, start_response)
        except Rejected as e:
            return self._reject(environ, start_response, e)
        except Exception:  # pylint: disable=broad-except
            logger.exception("Internal error on %s %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            return self._error(start_response, 500, "Internal server error; the server log has the details.",
                               close=True)

    def _handle(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET").upper()
        query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))

        host = self._check_host(environ)
        # One routing decision: the route LIT will dispatch to, and only for a canonical spelling.
        path = canonical_route(environ) or "/"
        token_source = self._check_token(environ, query)
        extra_headers: list[tuple[str, str]] = []
        if token_source == "query":
            query.pop(TOKEN_PARAM)
            extra_headers.append(("Set-Cookie", wz_http.dump_cookie(
                self.config.cookie_name, self.config.token, path="/", httponly=True, samesite="Strict")))
            if method in ("GET", "HEAD") and path not in self.api_paths:
                # Drop the token from the address bar (and from LIT's shareable URLs). The path is
                # canonical (one leading slash), so this never redirects off this server.
                location = path + (f"?{urllib.parse.urlencode(query)}" if query else "")
                start_response(_status_line(303), [("Location", location), ("Content-Length", "0"),
                                                   *_SAFE_HEADERS, *extra_headers])
                return [b""]

        is_api = path in self.api_paths
        if is_api and method != "POST":
            raise Rejected(405, f"{path} takes POST requests only.", (("Allow", "POST"),))
        if not is_api and method not in ("GET", "HEAD"):
            raise Rejected(405, f"{path} takes GET requests only.", (("Allow", "GET, HEAD"),))

        slot = False
        if method == "POST":
            self._check_post(environ, host)
            if path in FILE_PATH_ENDPOINTS and self.paths is None:
                self._confine(path, query, None)  # raises: off without --data_dir
            data = request_body.parse_json(request_body.read_body(environ, self.limits.max_body_bytes))
            limits_lib.validate_request(path, query, data, self.limits, self.model_names, self.dataset_names,
                                        self.example_ids)
            lit_routes.check_request(path, data)
            if path in FILE_PATH_ENDPOINTS:
                query, new_data = self._confine(path, query, data)
                if new_data is not data:
                    request_body.set_body(environ, json.dumps(new_data).encode("utf-8"))
            if limits_lib.needs_model(path, query, data, self.model_free_names):
                if not self.slots.try_acquire():
                    raise self.slots.busy_error(self.limits.retry_after_s)
                slot = True
        environ["QUERY_STRING"] = urllib.parse.urlencode(query)
        try:
            return self._call_app(environ, start_response, extra_headers, static=not is_api)
        finally:
            if slot:
                self.slots.release()
                memory.trim_soon()  # what the request freed after the model let go (lit_app/memory.py)

    def _call_app(self, environ: dict[str, Any], start_response: Callable[..., Any],
                  extra_headers: list[tuple[str, str]], static: bool) -> Iterable[bytes]:
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
            captured["status"], captured["headers"] = status, headers
            return captured.setdefault("written", []).append

        result = self.app(environ, capture)
        try:
            status = int(str(captured["status"]).split()[0])
            if status < 400:
                # LIT builds the whole answer before returning, so the body is ready.
                body = list(captured.get("written", [])) + list(result)
                status_line, headers = captured["status"], list(captured["headers"])
                if static:  # a page or file: its ETag, checked on each load (lit_app/edge/static_cache.py)
                    status_line, headers, body = static_cache.revalidated(environ, status_line, headers, body)
                start_response(status_line, headers + list(_SAFE_HEADERS) + extra_headers)
                return body
            text = b"".join(list(captured.get("written", [])) + list(result)).decode("utf-8", "replace")
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        message, details = lit_error_message(text)
        if status == 500:  # the client's mistakes are 4xx, not a server fault
            marked = environ.get(CLIENT_ERROR_KEY)
            mistake = lit_routes.client_mistake(message)
            if marked is not None:
                status = 409 if message.startswith(CANCELLED_PREFIX) else getattr(marked, "status", 400)
            elif mistake is not None:  # one of LIT's own checks of the request
                (status, message), details = mistake, ""
                logger.warning("LIT refused %s %s: %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"),
                               one_line(text.split("\n\nDetails:", 1)[0]))
            elif _LIT_PARAMETER_ERRORS.match(message):
                status = 400
        message = self.public_message(message)
        if status == 409:  # a cancelled request: the wrapper logged it (one INFO line)
            logger.debug("%s %s -> 409: %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"), message)
        elif details and status >= 500 and environ.get(CLIENT_ERROR_KEY) is None:
            # a server fault; a refused request (a client's mistake, or 503: busy, send it again) is one warning line
            logger.error("%s %s failed: %s\n%s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"),
                         message, details)
        else:
            logger.warning("%s %s -> %d: %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"), status,
                           message)
        retry = getattr(environ.get(CLIENT_ERROR_KEY), "retry_after_s", 0) if status == 503 else 0
        return self._error(start_response, status, message,
                           [*extra_headers, *((("Retry-After", str(retry)),) if retry else ())])
