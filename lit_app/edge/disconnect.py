"""Whether the HTTP client of the request a thread serves has gone away.

werkzeug's server (LIT's, ours, the notebook's) runs a WSGI app to the end
whatever the client does: it only notices a closed connection when it writes
the answer. For long computations (a blocking salience request) the app asks
instead, between chunks of work, through `client_gone()`:

* `SequenceSalienceApp.__call__` (lit_app/server.py) runs each request inside
  `serving(environ)`, which remembers the connection's socket
  (`environ["werkzeug.socket"]`) for the thread serving it.
* `client_gone()` looks at that socket without blocking and without taking
  data: it is gone when the peer has closed it (readable with nothing to read,
  an end of file) or reset it. Bytes waiting there (a pipelined next request)
  mean it is still there.

Without a socket (werkzeug's test client, another WSGI server) the client is
never taken as gone. Once `shut_down()` is called (the server's Ctrl-C), every
client reads as gone: every running request's cancel check says stop. A client that half-closes its side after sending the
request (HTTP clients do not) would read as gone.
"""

from __future__ import annotations

import contextlib
import contextvars
import select
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

_SOCKET: contextvars.ContextVar[Any] = contextvars.ContextVar("sequence_salience_client_socket", default=None)
_SHUTTING_DOWN = threading.Event()


def shut_down() -> None:
    """The process is stopping: from now on every client reads as gone (running requests stop)."""
    _SHUTTING_DOWN.set()


def stopping() -> bool:
    """True once `shut_down()` was called: a request cancelled from now on was stopped by the server, not by
    its client (lit_app/server.py answers it 503)."""
    return _SHUTTING_DOWN.is_set()


def peer_closed(sock: Any) -> bool:
    """True when the other end of a connected socket has closed or reset it (never blocks)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except (OSError, ValueError):  # reset, or closed on our side
        return True


@contextlib.contextmanager
def serving(environ: Mapping[str, Any]) -> Iterator[None]:
    """Remembers the request's socket for `client_gone` while the app serves it."""
    token = _SOCKET.set(environ.get("werkzeug.socket"))
    try:
        yield
    finally:
        _SOCKET.reset(token)


def client_gone() -> bool:
    """True when the client of the request this thread serves has disconnected."""
    sock = _SOCKET.get()
    return _SHUTTING_DOWN.is_set() or (sock is not None and peer_closed(sock))


def watcher() -> Callable[[], bool]:
    """`client_gone` bound to this thread's request, for code that checks from another call stack."""
    sock = _SOCKET.get()
    if sock is None:
        return _SHUTTING_DOWN.is_set
    return lambda: _SHUTTING_DOWN.is_set() or peer_closed(sock)
