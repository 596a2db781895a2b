"""The real server (`python -m lit_app.server`) as a subprocess, for the tests that claim it.

    with ServerProcess(["--max_new_tokens", "8"], tmp_path) as server:
        page.goto(server.url)                        # the printed URL, with ?token= (sets the cookie)
        status, headers, body = server.post_json("/get_info", {})   # carries the token
        server.request("GET", "/", headers={...})    # any request; `auth=False` leaves the token out
        conn = server.send_json(path, body); conn.close()   # a client that goes away mid-request
        server.preds(model, data)                    # one input's output (asserts a 200)
        server.wait_for(read, until, "what")         # polls read() until until(value)
        server.memory_kib(), server.reset_peak()     # its resident memory now / its peak since the reset (Linux)
        server.cpu_s(), server.wait_until_idle()     # its CPU seconds so far; until an earlier test's work has ended
        server.port, server.base_url, server.token, server.headers, server.log_tail()

Starts on a free loopback port with its log in `workdir`/server.log, waits until the server
prints "Sequence Salience is ready: <url>" (it prints that once it listens), reads the token
from that URL (the server requires one on every bind unless started with --no_token), and stops
it (terminate, then kill after 20 s) on exit.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from lit_app.edge.clients import CLIENT_HEADER

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 300
_READY = re.compile(r"is ready: (\S+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _foreground_signals() -> None:
    """In the child: SIGINT as in a terminal's foreground job. A suite started as a background job of a
    non-interactive shell (`make test &`) inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt: the Ctrl-C tests would send a signal nobody hears."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _background_signals() -> None:
    """In the child: SIGINT ignored, as in a background job of a script (`server &`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def client_header(client: str) -> dict[str, str]:
    """The header a page sends with every request (its client id, lit_app/edge/clients.py); {} for "": a script
    without one, whose requests supersede nothing."""
    return {CLIENT_HEADER: client} if client else {}


class ServerProcess:
    """`python -m lit_app.server --port <free> [--client_root <workdir>/client_root] <args>`.

    Attributes:
      url: the printed "is ready" URL (with ?token= unless --no_token): open it in a browser.
      base_url: the same without the query ("http://127.0.0.1:<port>/").
      token: the server's token (None with --no_token).
      headers: {"Authorization": "token <t>"} for scripts ({} without a token).
    own_client_root: False serves the default client root (lit_app/client_root in the checkout, as
      `make serve` does) instead of a private copy in `workdir`.
    command: what to run instead of `<this python> -m lit_app.server` (e.g. an installed
      `sequence-salience-server`, or an example script taking --port); cwd: its working folder
      (default: the repository).
    """

    def __init__(self, args: list[str], workdir: Path, timeout_s: float = START_TIMEOUT_S,
                 own_client_root: bool = True, env: dict[str, str] | None = None,
                 command: list[str] | None = None, cwd: Path | None = None, sigint_ignored: bool = False):
        self.port = free_port()
        self.log_path = Path(workdir) / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "lit_app.server"]), "--port", str(self.port),
             *(["--client_root", str(Path(workdir) / "client_root")] if own_client_root else []), *args],
            cwd=cwd or REPO, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_background_signals if sigint_ignored else _foreground_signals)
        deadline = time.monotonic() + timeout_s
        while not (m := _READY.search(self.log_path.read_text())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the server did not start (exit code {self.proc.returncode}):\n"
                                     f"{self.log_tail()}")
            time.sleep(0.3)
        self.url = m.group(1)
        parsed = urllib.parse.urlsplit(self.url)
        self.base_url = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path, "", ""))
        self.token = dict(urllib.parse.parse_qsl(parsed.query)).get("token")
        self.headers = {"Authorization": f"token {self.token}"} if self.token else {}

    def request(self, method: str, path: str, body: bytes | str | None = None, headers: dict | None = None,
                auth: bool = True, timeout: float = 600) -> tuple[int, dict[str, str], str]:
        """(status, headers with lower-case names, body text) of one request on a fresh connection."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers={**(self.headers if auth else {}), **(headers or {})})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def post_json(self, path: str, body: Any, headers: dict | None = None, **kw) -> tuple[int, dict[str, str], str]:
        """POSTs `body` as JSON (with the token); see `request`."""
        return self.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})},
                            **kw)

    def send_json(self, path: str, body: Any, timeout: float = 600, client: str = "") -> http.client.HTTPConnection:
        """POSTs `body` as JSON (with the token; as page `client` when given: `client_header`) and returns the
        open connection without reading the answer: `getresponse()` reads it; `close()` is a client that goes
        away mid-request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request("POST", path, body=json.dumps(body),
                     headers={**self.headers, "Content-Type": "application/json", **client_header(client)})
        return conn

    def preds(self, model: str, data: dict, client: str = "") -> dict[str, Any]:
        """`model`'s output for one input `data` (POST /get_preds?model=…), sent as page `client` when given
        (`client_header`); asserts the answer is a 200."""
        status, _, body = self.post_json(f"/get_preds?model={model}", {"inputs": [{"id": "r", "data": data}]},
                                         client_header(client))
        assert status == 200, body[:2000]
        return json.loads(body)[0]

    def wait_for(self, read, until, what: str, limit_s: float = 300) -> Any:
        """Reads `read()` until `until(value)` and returns that value; fails naming `what`, with the last
        value and the log's tail, after `limit_s` (a failure bound, not a timing assertion)."""
        deadline = time.monotonic() + limit_s
        while True:
            value = read()
            if until(value):
                return value
            assert time.monotonic() < deadline, f"never saw {what}; last {value}; log:\n{self.log_tail()}"
            time.sleep(0.05)

    def memory_kib(self, field: str = "VmRSS") -> int:
        """The server's resident memory in KiB (`field` "VmHWM": its peak since it started, or since `reset_peak`)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} for process {self.proc.pid}")

    def reset_peak(self) -> int:
        """Starts the server's peak resident memory (VmHWM) again from its resident memory now (Linux's
        /proc/<pid>/clear_refs, value 5); returns that, in KiB."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5", encoding="ascii")
        return self.memory_kib("VmHWM")

    def cpu_s(self) -> float:
        """CPU seconds the server has used so far (user + system, every thread)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_until_idle(self, quiet_cpu_s: float = 0.05, every_s: float = 1.0, limit_s: float = 300) -> None:
        """Waits until the server uses under `quiet_cpu_s` of CPU in `every_s`: earlier work on it (a previous
        test's jobs, stopping one by one after their clients left) has ended; fails after `limit_s`."""
        deadline = time.monotonic() + limit_s
        before = self.cpu_s()
        while time.monotonic() < deadline:
            time.sleep(every_s)
            now = self.cpu_s()
            if now - before < quiet_cpu_s:
                return
            before = now
        raise AssertionError(f"the server was still busy after {limit_s} s:\n" + self.log_tail())

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text()[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
