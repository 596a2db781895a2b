"""Wall-clock timing, load and prompts shared by the benchmarks."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """(fn(), the seconds it took by time.perf_counter)."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def burners(n: int) -> list[subprocess.Popen]:
    """`n` busy processes (`python -c "while 1: pass"`, nice 0) that load the CPU until the caller kills them."""
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


def long_prompt(tokens: int, tokenizer) -> str:
    """A prompt of about `tokens` tokens (`tokenizer`'s count, in steps of 20 notes): numbered notes about
    places and opening hours, then a question about them."""
    lines, k = [], 0
    text = ""
    while len(tokenizer(text)["input_ids"]) < tokens:
        topic = ["the museum", "the harbour", "the library", "the bakery", "the station"][k % 5]
        lines.append(f"Note {k + 1}: {topic} opens at {7 + k % 5} am on day {k % 28 + 1}; "
                     f"visitors counted {100 + 7 * k} people.")
        k += 1
        if k % 20 == 0:
            text = "\n".join(lines)
    return "\n".join(lines) + "\nQuestion: when does the library open on day 3?"
