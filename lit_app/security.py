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
5. Limits (`lit_app.limits`): body size (413), JSON and input checks (400),
   a bounded number of compute requests at once (503 + Retry-After).
6. Errors: every error body is one line of text; LIT's "Uncaught error: ...
   Details: <traceback>" bodies are cut to the message and the traceback is
   logged on the server.

LIT's own client sends POST bodies without a Content-Type; the client root
loads `REQUEST_GUARD_JS` (lit_app/client_build.py) before LIT's main.js, which
adds the header to same-origin POSTs, retries 503 answers after Retry-After,
and appends "Details" to one-line error bodies so that LIT's status bar shows
the message instead of "Unknown error".
"""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import http
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from werkzeug import http as wz_http
from werkzeug import serving
from werkzeug import wrappers as wz_wrappers

from lit_app import limits as limits_lib
from lit_app.limits import Limits, Rejected

logger = logging.getLogger("lit_app.security")

TOKEN_PARAM = "token"
TOKEN_ENV = "SEQUENCE_SALIENCE_TOKEN"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
FILE_PATH_ENDPOINTS = frozenset({"/create_dataset", "/create_model", "/save_datapoints", "/load_datapoints"})
# Config keys of /create_dataset and /create_model that hold server paths.
_PATH_KEY = re.compile(r"(path|file|dir|directory|filename)$", re.IGNORECASE)
# LIT appends these to a save/load path (lit_nlp.api.dataset.LIT_FILE_EXTENSION / LIT_SPEC_EXTENSION).
_LIT_SUFFIXES = ("", ".lit.jsonl", ".lit.jsonl.spec", ".spec")
_MAX_MESSAGE_CHARS = 600
# WSGI environ key where lit_app.server's handlers leave a client-mistake exception (models.RequestError):
# LIT answers it with 500; the middleware answers 400 (409 for a request a newer one cancelled).
CLIENT_ERROR_KEY = "sequence_salience.client_error"
# LIT 1.3.1's own checks of missing request parameters (ValueError -> 500 in LIT): client mistakes.
_LIT_PARAMETER_ERRORS = re.compile(r"^(Must provide a |No config specified|No base model specified|Unknown or missing"
                                   r" name )")
# Absolute server paths in an error message (two or more segments), replaced before it leaves the server.
_SERVER_PATH = re.compile(r"(?<![\w:/.~-])(/[\w.~+@-]+){2,}/?")
# Seconds a connection may stall while sending a request body or reading the answer.
SOCKET_TIMEOUT_S = 120
# Seconds a connection has to send a request's line and headers (from opening, and between keep-alive requests).
HEADER_TIMEOUT_S = 5.0
_SAFE_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "SAMEORIGIN"),
    ("Referrer-Policy", "no-referrer"),
)


# ---------------------------------------------------------------------------
# Configuration.


def is_wildcard(host: str) -> bool:
    """True for an address that binds every interface (0.0.0.0, ::, empty)."""
    return host.strip("[]") in ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals (127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def parse_host(value: str, default_port: int) -> tuple[str, int] | None:
    """'Name:port' / '[v6]:port' / 'name' -> (lower-case name without brackets, port); None if malformed."""
    value = value.strip()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    elif value.count(":") == 1:
        name, port_text = value.split(":")
    elif ":" in value:  # a bare IPv6 address (only in --allowed_hosts)
        name, port_text = value, ""
    else:
        name, port_text = value, ""
    name = name.lower().rstrip(".")
    if not name or any(c in name for c in "/\\@ \t"):
        return None
    if not port_text:
        return name, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return name, int(port_text)


@dataclasses.dataclass(frozen=True)
class SecurityConfig:
    """What the middleware allows.

    Attributes:
      host: the address the server is bound to (--host).
      port: the port it listens on (--port).
      allowed_hosts: extra Host names ("name" matches any port, "name:port" that port; "*" any host).
      token: the token every request must carry; None: no token (the server's --no_token).
      data_dir: the one folder LIT's file-path endpoints may read and write; None: they are off.
      limits: request limits (lit_app.limits.Limits).
      token_generated: True when the token was generated at start (printed in the URL).
    """

    host: str = "127.0.0.1"
    port: int = 5432
    allowed_hosts: tuple[str, ...] = ()
    token: str | None = None
    data_dir: str | None = None
    limits: Limits = Limits()
    token_generated: bool = False

    def __post_init__(self):
        if self.token is not None and len(self.token) < 8:
            raise ValueError("The token is shorter than 8 characters; use a longer --token (or none on loopback).")
        if not is_loopback(self.host) and not self.token:
            raise ValueError(f"--host {self.host} is not a loopback address, so a token is required"
                             " (drop --no_token).")
        if self.data_dir is not None and not os.path.isdir(self.data_dir):
            raise ValueError(f"--data_dir {self.data_dir!r} is not a folder. Fix: create it or pass another one.")

    @property
    def cookie_name(self) -> str:
        # Cookies ignore ports: one name per port keeps two local servers apart.
        return f"sequence_salience_token_{self.port}"

    def browser_url(self) -> str:
        """The address to open (with ?token= when there is one)."""
        host = "127.0.0.1" if is_wildcard(self.host) else self.host
        url = f"http://{_url_host(host)}:{self.port}/"
        return f"{url}?{TOKEN_PARAM}={self.token}" if self.token else url


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Adds the security and limit flags to the server's parser."""
    g = parser.add_argument_group("security and limits")
    g.add_argument("--allowed_hosts", action="append", default=[], metavar="NAME[:PORT]",
                   help="Extra Host names to accept besides the bound address, localhost, 127.0.0.1"
                        " and [::1] (comma-separated or repeated; '*' accepts any).")
    g.add_argument("--token", default=os.environ.get(TOKEN_ENV) or None,
                   help="Token every request must carry (?token=, a cookie, or 'Authorization: token ...')."
                        f" Default: ${TOKEN_ENV}, else one generated at start and printed in the URL.")
    g.add_argument("--no_token", action="store_true",
                   help="Serve without a token (loopback --host only): any local process or user can then"
                        " drive the server. The startup line warns.")
    g.add_argument("--data_dir", default=None,
                   help="Folder that LIT's save/load datapoints and new-dataset dialogs may use."
                        " Without it those endpoints are off.")
    defaults = Limits()
    g.add_argument("--max_body_bytes", type=int, default=defaults.max_body_bytes,
                   help="Largest request body (HTTP 413 beyond).")
    g.add_argument("--max_prompt_chars", type=int, default=defaults.max_prompt_chars,
                   help="Largest prompt + system + target of one input, in characters.")
    g.add_argument("--max_ig_steps", type=int, default=defaults.max_ig_steps,
                   help=f"Largest integrated-gradients step count (at most {defaults.max_ig_steps}).")
    g.add_argument("--max_smooth_grad_samples", type=int, default=defaults.max_smooth_grad_samples,
                   help=f"Largest SmoothGrad sample count (at most {defaults.max_smooth_grad_samples}).")
    g.add_argument("--max_pending_requests", type=int, default=defaults.max_pending,
                   help="Compute requests running or waiting for the model at once (HTTP 503 beyond).")
    g.add_argument("--max_connections", type=int, default=defaults.max_connections,
                   help="Open connections at once (one thread each; HTTP 503 beyond). A connection has"
                        f" {HEADER_TIMEOUT_S:g} s to send its headers; idle ones give their slot to new ones.")
    g.add_argument("--max_connections_per_client", type=int, default=None,
                   help="Open connections from one client address (default: half of --max_connections).")


def check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reports bad security/limit flags through parser.error."""
    try:
        config_from_args(args)
    except ValueError as e:
        parser.error(str(e))


def config_from_args(args: argparse.Namespace) -> SecurityConfig:
    """The SecurityConfig of parsed flags; generates a token unless one is given or --no_token."""
    allowed = tuple(h.strip() for entry in args.allowed_hosts for h in entry.split(",") if h.strip())
    for h in allowed:
        if h != "*" and parse_host(h, args.port) is None:
            raise ValueError(f"--allowed_hosts entry {h!r} is not a host name or name:port.")
    token, generated = args.token, False
    if getattr(args, "no_token", False):
        if token:
            raise ValueError("--no_token and --token (or $SEQUENCE_SALIENCE_TOKEN) contradict each other; pass one.")
        if not is_loopback(args.host):
            raise ValueError(f"--no_token is only for a loopback --host; {args.host} is reachable from other"
                             " machines, so a token is required.")
    elif not token:
        token, generated = new_token(), True
    lim = Limits(
        max_body_bytes=args.max_body_bytes,
        max_prompt_chars=args.max_prompt_chars,
        max_new_tokens=args.max_new_tokens,
        max_ig_steps=args.max_ig_steps,
        max_smooth_grad_samples=args.max_smooth_grad_samples,
        max_pending=args.max_pending_requests,
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client or max(1, args.max_connections // 2),
    )
    data_dir = os.path.realpath(args.data_dir) if args.data_dir else None
    return SecurityConfig(host=args.host, port=args.port, allowed_hosts=allowed, token=token,
                          data_dir=data_dir, limits=lim, token_generated=generated)


_QUERY_PAIR = re.compile(r"(?<=[?&;])([^=&;\s\"']*)(=|%3[Dd])([^&;\s\"']+)")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def redact(text: str) -> str:
    """`text` with the value of every `token=` query parameter replaced by `[redacted]`.

    Keys are compared after %-decoding (`tok%65n=`), case-insensitively.
    """
    def one(m: re.Match) -> str:
        key = urllib.parse.unquote_plus(m.group(1)).strip().lower()
        return f"{m.group(1)}{m.group(2)}[redacted]" if key.endswith(TOKEN_PARAM) else m.group(0)

    return _QUERY_PAIR.sub(one, text)


def new_token() -> str:
    """A fresh random token (48 hex digits)."""
    return secrets.token_hex(24)


def token_headers(token: str | None) -> dict[str, str]:
    """The header a script sends with a token ({} for none)."""
    return {"Authorization": f"token {token}"} if token else {}


class RequestHandler(serving.WSGIRequestHandler):
    """werkzeug's handler with a socket timeout and an access log without secrets.

    werkzeug's own `log_request` writes the request line with its query string
    (`GET /?token=...`) and raises on some request targets (`http://h:1\\x`),
    which left such a request without an answer. Here every log line goes
    through `redact`, control characters are escaped, and no header or cookie
    value is ever logged.
    """

    timeout = SOCKET_TIMEOUT_S

    def handle_one_request(self) -> None:
        report = getattr(self.server, "reading", None)
        if report is not None:
            report(self.connection, True)  # the watchdog closes it if the headers do not come in time
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        report = getattr(self.server, "reading", None)
        if report is not None:
            report(self.connection, False)
        return ok

    def make_environ(self) -> dict[str, Any]:
        environ = super().make_environ()
        # Python's http.server turns a leading "//" into "/" before werkzeug sees the path; keep the
        # target as the client sent it, so that `canonical_route` refuses that spelling too.
        words = self.requestline.split()
        if len(words) >= 2:
            environ["RAW_URI"] = environ["REQUEST_URI"] = words[1]
        return environ

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        line = f"{self.command} {self.path} {self.request_version}" if hasattr(self, "path") else self.requestline
        self.log("info", '"%s" %s %s', line, code, size)

    def log(self, type: str, message: str, *args: Any) -> None:  # pylint: disable=redefined-builtin
        text = redact(message % args if args else message)
        text = _CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
        super().log(type, "%s", text)


@dataclasses.dataclass
class _Connection:
    address: str
    opened: float
    reading_since: float | None  # waiting for a request's line and headers since (monotonic); None: serving one


class BoundedThreadedServer(serving.ThreadedWSGIServer):
    """werkzeug's thread-per-connection server with bounded, fairly shared connections.

    * At most `max_connections` connections at once (one thread each), and at
      most `max_per_client` from one client address.
    * A connection must send a request's line and headers within
      `header_timeout_s` of opening (and of each keep-alive request): a watchdog
      closes it otherwise, so idle or stalled connections cannot hold slots.
    * When a limit is reached, a new connection takes the slot of the oldest
      connection still waiting for its headers (from the same address when the
      per-client limit is the one reached); only when every counted connection
      is serving a request is the new one answered with a one-line 503
      (Retry-After: 1) and closed. A local process opening 100 idle connections
      therefore cannot keep the page's requests out.
    """

    def __init__(self, host: str, port: int, app: Callable[..., Iterable[bytes]], max_connections: int,
                 max_per_client: int | None = None, header_timeout_s: float = HEADER_TIMEOUT_S):
        if max_connections < 1:
            raise ValueError(f"max_connections is {max_connections}; it must be at least 1.")
        super().__init__(host, port, app, handler=RequestHandler)
        self.max_connections = max_connections
        self.max_per_client = max(1, max_per_client or max_connections)
        self.header_timeout_s = header_timeout_s
        self.refused = 0
        self.evicted = 0
        self._conns: dict[Any, _Connection] = {}
        self._count_lock = threading.Lock()
        self._closing = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="connection-watchdog", daemon=True)
        self._watchdog.start()

    @property
    def active(self) -> int:
        """Connections counted against the limits now."""
        return len(self._conns)

    @property
    def serving(self) -> int:
        """Counted connections that are serving a request (not waiting for headers)."""
        with self._count_lock:
            return sum(s.reading_since is None for s in self._conns.values())

    def _per_address(self, address: str) -> list[tuple[Any, _Connection]]:
        return [(c, s) for c, s in self._conns.items() if s.address == address]

    def _victim(self, among: list[tuple[Any, _Connection]]) -> Any:
        waiting = [(s.reading_since, c) for c, s in among if s.reading_since is not None]
        return min(waiting, key=lambda t: t[0])[1] if waiting else None

    def process_request(self, request: Any, client_address: Any) -> None:
        address = str(client_address[0]) if isinstance(client_address, tuple) else str(client_address)
        now = time.monotonic()
        with self._count_lock:
            mine = self._per_address(address)
            ok = True
            if len(mine) >= self.max_per_client or len(self._conns) >= self.max_connections:
                pool = mine if len(mine) >= self.max_per_client else list(self._conns.items())
                victim = self._victim(pool)
                if victim is None:
                    ok = False
                    self.refused += 1
                else:
                    self._evict(victim)
            if ok:
                self._conns[request] = _Connection(address, now, now)
        if not ok:
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def reading(self, request: Any, waiting: bool) -> None:
        """The handler's report: waiting for a request's headers (True) or serving one (False)."""
        with self._count_lock:
            state = self._conns.get(request)
            if state is not None:
                state.reading_since = time.monotonic() if waiting else None

    def _evict(self, request: Any) -> None:
        """Closes a connection that has not sent its headers; its slot is free at once."""
        self._conns.pop(request, None)
        self.evicted += 1
        try:
            request.shutdown(socket.SHUT_RDWR)  # its thread's read returns at once, and it ends
        except OSError:
            pass

    def _watch(self) -> None:
        while not self._closing.wait(min(0.5, self.header_timeout_s / 4)):
            deadline = time.monotonic() - self.header_timeout_s
            with self._count_lock:
                for request, state in list(self._conns.items()):
                    if state.reading_since is not None and state.reading_since < deadline:
                        self._evict(request)

    def _done(self, request: Any) -> None:
        with self._count_lock:
            self._conns.pop(request, None)

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()

    def _refuse(self, request: Any) -> None:
        body = (f"The server has {self.max_connections} connections open (--max_connections), or this client"
                f" {self.max_per_client} (--max_connections_per_client); retry in 1 s.").encode("utf-8")
        head = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Retry-After: 1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode("ascii")
        try:
            request.settimeout(0.5)  # never let one slow client stall the accept loop
            request.sendall(head + body)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)


def make_server(host: str, port: int, app: Callable[..., Iterable[bytes]], max_connections: int,
                max_per_client: int | None = None, header_timeout_s: float = HEADER_TIMEOUT_S
                ) -> BoundedThreadedServer:
    """The HTTP server for `app`: threaded, bounded and fairly shared connections, header and socket timeouts.

    max_per_client: connections from one address (default: half of `max_connections`, at least 1).
    """
    if max_per_client is None:
        max_per_client = max(1, max_connections // 2)
    return BoundedThreadedServer(host, port, app, max_connections, max_per_client, header_timeout_s)


# ---------------------------------------------------------------------------
# Routing: one decision, the one LIT makes.

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


# ---------------------------------------------------------------------------
# Responses.


def one_line(text: str, limit: int = _MAX_MESSAGE_CHARS) -> str:
    """Text collapsed to one line of at most `limit` characters."""
    line = re.sub(r"\s*[\r\n]+\s*", " ", text).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def lit_error_message(body: str) -> tuple[str, str]:
    """(one-line message, details) of a LIT error body ("Uncaught error: <m>\\n\\nDetails: <traceback>")."""
    details = ""
    if "\n\nDetails:" in body:
        body, details = body.split("\n\nDetails:", 1)
    body = re.sub(r"^\s*Uncaught error:\s*", "", body)
    message = one_line(body) or "The server failed without a message"
    if re.fullmatch(r"'[^']*'", message):  # LIT's bare KeyError
        message = f"Unknown or missing name {message} in the request"
    return message, details.strip()


def _status_line(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


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
    ):
        """Args:
          app: the LIT WSGI app.
          config: what to allow.
          model_names, dataset_names: callables naming the app's models and
            datasets, for clear 400s on unknown names; default: the app's
            `model_names()` / `dataset_names()` methods when it has them.
          api_paths: the app's API routes (LIT's handler paths); every other
            route is a page or static file.
        """
        self.app = app
        self.config = config
        self.limits = config.limits
        self.model_names = model_names or getattr(app, "model_names", None)
        self.dataset_names = dataset_names or getattr(app, "dataset_names", None)
        self.example_ids = getattr(app, "example_ids", None)
        self.paths = PathConfiner(config.data_dir) if config.data_dir else None
        self.slots = limits_lib.ComputeSlots(config.limits.max_pending)
        self.api_paths = api_paths
        self._allowed = self._allowed_hosts()

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
            or (is_wildcard(self.config.host) and _is_ip(parsed[0]) and parsed[1] == self.config.port)
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
                    if _PATH_KEY.search(key) and isinstance(value, str) and value:
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
            data = limits_lib.parse_json(limits_lib.read_body(environ, self.limits.max_body_bytes))
            limits_lib.validate_request(path, query, data, self.limits, self.model_names, self.dataset_names,
                                        self.example_ids)
            if path in FILE_PATH_ENDPOINTS:
                query, new_data = self._confine(path, query, data)
                if new_data is not data:
                    limits_lib.set_body(environ, json.dumps(new_data).encode("utf-8"))
            if path not in limits_lib.CHEAP_PATHS and not limits_lib.is_poll(path, data):
                if not self.slots.try_acquire():
                    raise self.slots.busy_error(self.limits.retry_after_s)
                slot = True
        environ["QUERY_STRING"] = urllib.parse.urlencode(query)
        try:
            return self._call_app(environ, start_response, extra_headers)
        finally:
            if slot:
                self.slots.release()

    def _call_app(self, environ: dict[str, Any], start_response: Callable[..., Any],
                  extra_headers: list[tuple[str, str]]) -> Iterable[bytes]:
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
                start_response(captured["status"], list(captured["headers"]) + list(_SAFE_HEADERS) + extra_headers)
                return body
            text = b"".join(list(captured.get("written", [])) + list(result)).decode("utf-8", "replace")
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        message, details = lit_error_message(text)
        if status == 500 and (environ.get(CLIENT_ERROR_KEY) is not None or _LIT_PARAMETER_ERRORS.match(message)):
            status = 409 if message.startswith("Cancelled") else 400  # the client's mistake, not a server fault
        message = self.public_message(message)
        if details:
            logger.error("%s %s failed: %s\n%s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"),
                         message, details)
        else:
            logger.warning("%s %s -> %d: %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"), status,
                           message)
        return self._error(start_response, status, message, extra_headers)


# ---------------------------------------------------------------------------
# The client-side half: loaded by index.html before LIT's main.js.

REQUEST_GUARD_NAME = "request_guard.js"
REQUEST_GUARD_JS = r"""// Sequence Salience request guard (written by lit_app/client_build.py from lit_app/security.py).
// LIT's client POSTs JSON without a Content-Type; the server (lit_app/security.py) refuses
// such POSTs, so this adds the header to same-origin POSTs. It also retries a 503 after its
// Retry-After, and appends "Details" to one-line error bodies, which LIT's status bar needs
// to show the message instead of "Unknown error".
(function () {
  'use strict';
  if (window.__ssRequestGuard) return;
  window.__ssRequestGuard = true;
  var nativeFetch = window.fetch.bind(window);
  var MAX_RETRIES = 30;
  function sameOrigin(url) {
    try { return new URL(url, window.location.href).origin === window.location.origin; }
    catch (e) { return false; }
  }
  function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }
  window.fetch = async function (input, init) {
    var isRequest = typeof Request !== 'undefined' && input instanceof Request;
    var url = isRequest ? input.url : String(input);
    var method = ((init && init.method) || (isRequest ? input.method : 'GET')).toUpperCase();
    if (method !== 'POST' || !sameOrigin(url)) return nativeFetch(input, init);
    var headers = new Headers((init && init.headers) || (isRequest ? input.headers : undefined));
    if (!headers.has('Content-Type')) headers.set('Content-Type', 'application/json');
    var opts = Object.assign({}, init || {}, {headers: headers});
    for (var attempt = 0; ; attempt++) {
      var response = await nativeFetch(isRequest ? input.clone() : input, opts);
      if (response.ok) return response;
      var retryAfter = Number(response.headers.get('Retry-After'));
      if (response.status === 503 && attempt < MAX_RETRIES && retryAfter > 0) {
        await sleep(Math.min(retryAfter, 30) * 1000);
        continue;
      }
      var text = await response.text();
      if (!/\n\nDetails:/.test(text)) {
        text = text + '\n\nDetails: HTTP ' + response.status + ' from ' + url + '; the server log has more.';
      }
      var copied = new Headers(response.headers);
      copied.delete('Content-Length');
      return new Response(text, {status: response.status, statusText: response.statusText, headers: copied});
    }
  };
})();
"""
