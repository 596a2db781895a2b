"""Test support for time slices (sequence_salience/slices.py)."""

from __future__ import annotations

import itertools

from sequence_salience.slices import SliceSizer


class ScriptedSizer(SliceSizer):
    """Slice sizes from a script (cycled), whatever the clock says: exercises uneven slices."""

    def __init__(self, script):
        super().__init__(0.4)
        self._script = itertools.cycle(script)

    def units(self, cap: int) -> int:
        return max(1, min(cap, next(self._script)))

    def chunk_units(self, cap: int, rows: int = 1) -> int:
        return self.units(cap)
