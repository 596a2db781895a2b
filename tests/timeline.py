"""A pytest plugin that records when each worker ran each test file: `-p tests.timeline` (`make test` loads it).

    .venv/bin/python -m pytest -p tests.timeline -n 3 --dist loadfile ...       # prints the per-worker summary
    TEST_TIMELINE=/tmp/timeline.tsv .venv/bin/python -m pytest -p tests.timeline ...   # and writes every file's line

Under pytest-xdist the controller receives every test's reports with the worker that ran it and the phase's start
and stop (epoch seconds); this plugin keeps, per (worker, file), the first phase's start, the last phase's stop and
the summed phase time. At the end it prints one line per worker (files run, busy seconds, when it started and
finished its last file, relative to the first test's start) and the idle tail: how long the first worker to run out
of files waited for the last one (what a better order of the files could save at most), with the files each worker
ran last. It also reads the machine's CPU time (/proc/stat) every few seconds and prints how busy the cores were from
the first test's start to the last test's end, and over that run's last minute (a CPU-bound run on 2 cores with 3
workers keeps both busy; idle core-seconds are what scheduling could still use). $TEST_TIMELINE gets one line per
(worker, file): worker, file, start, end (seconds from the first test's start), summed phase seconds, tests; then
one line per interval between CPU samples within the tests' time: "cpu", "", start, end, the core-seconds the
machine was busy in between, 0. Without xdist every file runs on the one worker "main".
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import pytest

_LAST_FILES_SHOWN = 3
_CPU_EVERY_S = 2.0
_TAIL_S = 60.0


def cpu_times() -> tuple[float, float]:
    """(busy, idle) seconds of all cores together since boot (/proc/stat's first line; idle includes iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / hz, idle / hz


def busy_share(samples: list[tuple[float, float, float]], since: float, until: float) -> tuple[float, float] | None:
    """From (wall time, busy, idle) samples: the cores' busy share and idle core-seconds from the first sample at or
    after `since` to the last one at or before `until`; None with fewer than two such samples."""
    window = [s for s in samples if since <= s[0] <= until]
    if len(window) < 2:
        return None
    busy, idle = window[-1][1] - window[0][1], window[-1][2] - window[0][2]
    return (busy / (busy + idle) if busy + idle > 0 else 0.0), idle


@dataclass
class FileSpan:
    """One file's run on one worker: its first phase's start, its last phase's stop, the phases' summed time."""
    worker: str
    path: str
    start: float
    end: float
    busy: float = 0.0
    tests: int = 0


class Timeline:
    """The file spans seen so far, keyed by (worker, file)."""

    def __init__(self):
        self.spans: dict[tuple[str, str], FileSpan] = {}
        self.cpu: list[tuple[float, float, float]] = []  # (wall time, busy, idle) samples of the whole machine

    def add(self, worker: str, nodeid: str, when: str, start: float, stop: float) -> None:
        path = nodeid.split("::", 1)[0]
        span = self.spans.get((worker, path))
        if span is None:
            span = self.spans[(worker, path)] = FileSpan(worker, path, start, stop)
        span.start, span.end = min(span.start, start), max(span.end, stop)
        span.busy += stop - start
        span.tests += when == "call"

    def workers(self) -> dict[str, list[FileSpan]]:
        """Each worker's file spans in the order it ran them."""
        out: dict[str, list[FileSpan]] = {}
        for span in sorted(self.spans.values(), key=lambda s: s.start):
            out.setdefault(span.worker, []).append(span)
        return dict(sorted(out.items()))

    def summary(self) -> list[str]:
        """The lines printed at the end: one per worker, then the idle tail and the files run last."""
        if not self.spans:
            return []
        t0 = min(s.start for s in self.spans.values())
        by_worker = self.workers()
        ends = {w: max(s.end for s in spans) - t0 for w, spans in by_worker.items()}
        lines = [f"{w}: {len(spans)} files, busy {sum(s.busy for s in spans):.0f} s, first test at "
                 f"{spans[0].start - t0:.0f} s, last file ended at {ends[w]:.0f} s" for w, spans in by_worker.items()]
        if len(by_worker) > 1:
            lines.append(f"idle tail: the first worker out of files ended {max(ends.values()) - min(ends.values()):.0f} s"
                         " before the last one")
        for w, spans in by_worker.items():
            lines.append(f"{w} ran last: " + ", ".join(f"{s.path} ({s.start - t0:.0f}-{s.end - t0:.0f} s)"
                                                      for s in spans[-_LAST_FILES_SHOWN:]))
        t1 = max(s.end for s in self.spans.values())
        whole, tail = busy_share(self.cpu, t0, t1), busy_share(self.cpu, t1 - _TAIL_S, t1)
        if whole is not None:
            lines.append(f"CPU: the {os.cpu_count()} cores were busy {whole[0]:.0%} of the run ({whole[1]:.0f}"
                         " core-seconds idle)" + (f", {tail[0]:.0%} in its last {_TAIL_S:.0f} s" if tail else ""))
        return lines

    def rows(self) -> list[str]:
        """The tab-separated lines of $TEST_TIMELINE (times in seconds from the first test's start)."""
        t0 = min((s.start for s in self.spans.values()), default=0.0)
        t1 = max((s.end for s in self.spans.values()), default=0.0)
        files = [f"{s.worker}\t{s.path}\t{s.start - t0:.2f}\t{s.end - t0:.2f}\t{s.busy:.2f}\t{s.tests}"
                 for spans in self.workers().values() for s in spans]
        return files + [f"cpu\t\t{a[0] - t0:.2f}\t{b[0] - t0:.2f}\t{b[1] - a[1]:.2f}\t0"
                        for a, b in zip(self.cpu, self.cpu[1:]) if a[0] >= t0 and b[0] <= t1]


_TIMELINE = Timeline()
_STOP = threading.Event()


def _sample_cpu() -> None:
    while not _STOP.is_set():
        _TIMELINE.cpu.append((time.time(), *cpu_times()))
        _STOP.wait(_CPU_EVERY_S)


def pytest_sessionstart(session: pytest.Session) -> None:
    """On the controller (or the only process): starts sampling the machine's CPU time."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and os.path.exists("/proc/stat"):
        threading.Thread(target=_sample_cpu, name="timeline-cpu", daemon=True).start()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """On the xdist controller (or the only process without xdist): every phase's report of every test."""
    if hasattr(report, "node") or not os.environ.get("PYTEST_XDIST_WORKER"):
        node = getattr(report, "node", None)
        worker = node.gateway.id if node is not None else "main"
        if report.stop > report.start > 0:
            _TIMELINE.add(worker, report.nodeid, report.when, report.start, report.stop)


def pytest_terminal_summary(terminalreporter) -> None:
    _STOP.set()
    if os.path.exists("/proc/stat") and not os.environ.get("PYTEST_XDIST_WORKER"):
        _TIMELINE.cpu.append((time.time(), *cpu_times()))
    lines = _TIMELINE.summary()
    if not lines:
        return
    terminalreporter.section("files per worker (tests/timeline.py)")
    for line in lines:
        terminalreporter.write_line(line)
    if path := os.environ.get("TEST_TIMELINE"):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write("worker\tfile\tstart_s\tend_s\tbusy_s\ttests\n" + "".join(r + "\n" for r in _TIMELINE.rows()))
