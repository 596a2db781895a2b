"""A pytest plugin that measures the CPU seconds each test costs: `-p tests.cpu_report` with $CPU_REPORT set.

    CPU_REPORT=/tmp/cpu.tsv OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python -m pytest -p tests.cpu_report -n 0 FILE...

Appends one line per test phase to $CPU_REPORT: node id, phase (setup / call / teardown), CPU seconds (user + sys),
wall seconds, the 1-minute load average at its end, the xdist worker; and, at the end, one line per process that ran
(its CPU seconds and command line). CPU is that of pytest and every process below it (the servers a test starts,
Playwright's driver and Chromium, Ray's daemons and workers, notebook kernels), read from /proc every 0.2 s, so a
process that another one re-parents or that exits still counts up to its last reading (getrusage's children would
miss what no one waited for). On a loaded machine compare CPU, not wall (docs/benchmarks.md, "Session 31"), and set
OMP_NUM_THREADS=1 as `make test`'s three workers get (tests/conftest.py): with more torch threads than free cores,
a loaded machine's spinning threads add CPU that no test asked for. The reporter's own readings of /proc (8-12 ms each with 150-200
processes on the machine, five a second: 4-6 % of a core; a test that sleeps 20 s cost 0.7 s, a 600 s one ~25-35 s,
counted as the test's until session 41) are left out of every figure and written as a line of their own at the end.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")
_ME = os.getpid()
_POLL_S = 0.2


def _stat(pid: int) -> tuple[int, int, float] | None:
    """(parent pid, start time in ticks, user + sys seconds) of `pid`, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / _TICKS


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


class _Tree:
    """The last CPU reading of every process seen below this one, keyed by (pid, start time)."""

    def __init__(self):
        self.cpu: dict[tuple[int, int], float] = {}
        self.commands: dict[tuple[int, int], str] = {}
        self.lock = threading.Lock()
        self.own = 0.0  # CPU seconds of this reporter's readings (any thread's), left out of the sums

    def read(self) -> float:
        """The CPU seconds of every process seen so far, less this reporter's own readings."""
        start = time.thread_time()
        stats = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
                stats[int(entry.name)] = st
        below, frontier = {_ME}, [_ME]
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for child in children.get(frontier.pop(), ()):
                if child not in below:
                    below.add(child)
                    frontier.append(child)
        with self.lock:
            for pid in below:
                if pid in stats:
                    key = (pid, stats[pid][1])
                    if key not in self.commands:
                        self.commands[key] = _command(pid)
                    self.cpu[key] = stats[pid][2]
            self.own += time.thread_time() - start
            return sum(self.cpu.values()) - self.own

    def poll(self) -> None:
        while True:
            self.read()
            time.sleep(_POLL_S)


_TREE = _Tree()
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


def _write(line: str) -> None:
    with open(os.environ["CPU_REPORT"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


def pytest_configure(config):
    if os.environ.get("CPU_REPORT"):
        threading.Thread(target=_TREE.poll, daemon=True, name="cpu_report").start()


def _measured(phase: str):
    @pytest.hookimpl(hookwrapper=True)
    def hook(item, *args, **kwargs):
        if not os.environ.get("CPU_REPORT"):
            yield
            return
        cpu0, wall0 = _TREE.read(), time.monotonic()
        yield
        _write(f"{item.nodeid}\t{phase}\t{max(0.0, _TREE.read() - cpu0):.1f}\t{time.monotonic() - wall0:.1f}"
               f"\t{os.getloadavg()[0]:.1f}\t{_WORKER}")
    return hook


pytest_runtest_setup = _measured("setup")
pytest_runtest_call = _measured("call")
pytest_runtest_teardown = _measured("teardown")


def pytest_unconfigure(config):
    if not os.environ.get("CPU_REPORT"):
        return
    _TREE.read()
    with _TREE.lock:
        cpus = {key: cpu - (_TREE.own if key[0] == _ME else 0.0) for key, cpu in _TREE.cpu.items()}
        for key, cpu in sorted(cpus.items(), key=lambda kv: -kv[1]):
            _write(f"process\t{cpu:.1f}\t{_TREE.commands[key]}\t{_WORKER}")
        _write(f"reporter\t{_TREE.own:.1f}\tthis plugin's readings of /proc (left out of the figures above)\t{_WORKER}")
