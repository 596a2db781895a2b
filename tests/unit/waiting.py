"""Waiting for a condition another thread (or a server) makes true, for the tests of threads, locks and jobs."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], what: str, guard_s: float = 60.0, poll_s: float = 0.001) -> None:
    """Returns once `condition()` is true, asked every `poll_s`; raises AssertionError naming `what` after `guard_s`.

    The guard only turns a hang into a failure; it is not a timing assertion.
    """
    deadline = time.monotonic() + guard_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(poll_s)
