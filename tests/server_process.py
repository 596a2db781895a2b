"""The real server (`python -m lit_app.server`) as a subprocess, for the tests that claim it.

    with ServerProcess(["--max_new_tokens", "8"], tmp_path) as server:
        ...  # server.port, server.url (the printed "is ready" URL), server.log_tail()

Starts on a free loopback port with its log in `workdir`/server.log, waits until the server
prints "Sequence Salience is ready: <url>" (it prints that once it listens), and stops it
(terminate, then kill after 20 s) on exit.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 300
_READY = re.compile(r"is ready: (\S+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m lit_app.server --port <free> [--client_root <workdir>/client_root] <args>`.

    own_client_root: False serves the repository's client root (lit_app/client_root, as
      `make serve` does) instead of a private copy in `workdir`.
    """

    def __init__(self, args: list[str], workdir: Path, timeout_s: float = START_TIMEOUT_S,
                 own_client_root: bool = True):
        self.port = free_port()
        self.log_path = Path(workdir) / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lit_app.server", "--port", str(self.port),
             *(["--client_root", str(Path(workdir) / "client_root")] if own_client_root else []), *args],
            cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not (m := _READY.search(self.log_path.read_text())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the server did not start (exit code {self.proc.returncode}):\n"
                                     f"{self.log_tail()}")
            time.sleep(0.3)
        self.url = m.group(1)

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
