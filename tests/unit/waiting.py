"""Waiting for a condition another thread makes true, for the unit tests of threads and locks."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], what: str, guard_s: float = 60.0) -> None:
    """Returns once `condition()` is true; raises AssertionError naming `what` after `guard_s`.

    The guard only turns a hang into a failure; it is not a timing assertion.
    """
    deadline = time.monotonic() + guard_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.001)
