"""The HTTP server: werkzeug's thread-per-connection server with bounded, fairly shared connections,
header and socket timeouts, and an access log without secrets.

`make_server` builds it (raising `CannotListen` when it cannot bind); `BoundedThreadedServer` holds the
connection rules; `RequestHandler` times sockets out and logs without tokens. (The process's malloc arenas: lit_app/memory.py.)
"""

from __future__ import annotations

import dataclasses
import errno
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug import serving

from lit_app.edge.tokens import redact

# Seconds a connection may stall while sending a request body or reading the answer.
SOCKET_TIMEOUT_S = 120
# Seconds a connection has to send a request's line and headers (from opening, and between keep-alive requests).
HEADER_TIMEOUT_S = 5.0
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


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


class CannotListen(Exception):
    """The server could not bind host:port. `in_use`: another program holds the port; `reason`: the OS's words.
    (Not an OSError: werkzeug would answer that itself, printing its own lines and exiting 1.)"""

    def __init__(self, host: str, port: int, error: OSError):
        self.host, self.port = host, port
        self.in_use = error.errno == errno.EADDRINUSE
        self.reason = error.strerror or str(error)
        super().__init__(f"{host}:{port}: {self.reason}")


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
        # Before the bind: a failed listen (server_activate) ends in werkzeug calling server_close, which reads it.
        self._closing = threading.Event()
        super().__init__(host, port, app, handler=RequestHandler)
        self.max_connections = max_connections
        self.max_per_client = max(1, max_per_client or max_connections)
        self.header_timeout_s = header_timeout_s
        self.refused = 0
        self.evicted = 0
        self._conns: dict[Any, _Connection] = {}
        self._count_lock = threading.Lock()
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

    def server_bind(self) -> None:
        """Raises CannotListen (socket closed) when the bind fails: the caller says the cause and the fix."""
        try:
            super().server_bind()
        except OSError as e:
            self.socket.close()
            host, port = self.server_address[:2]
            raise CannotListen(str(host), int(port), e) from None

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
    Raises CannotListen when host:port cannot be bound (a port in use, an address not on this machine).
    """
    if max_per_client is None:
        max_per_client = max(1, max_connections // 2)
    return BoundedThreadedServer(host, port, app, max_connections, max_per_client, header_timeout_s)


