"""A RowWorker whose process dies on a chosen row, once (tests/integration/test_evaluate_ray.py).

It lives in the `tests` package so that Ray worker processes can import it (the test module
itself is imported by pytest under another name).
"""

from __future__ import annotations

import os

from sequence_salience.evaluate import RowWorker


class DyingWorker(RowWorker):
    """Exits its process (as a crash or a killed node would) when it starts the row whose key is
    `die_on`, unless `marker` exists; it creates the marker first, so a retry succeeds."""

    def __init__(self, spec, config, die_on, marker):
        super().__init__(spec, config)
        self.die_on, self.marker = die_on, marker

    def run(self, key, row):
        if key == self.die_on and not os.path.exists(self.marker):
            with open(self.marker, "w", encoding="utf-8") as f:
                f.write(self.name)
            os._exit(1)  # pylint: disable=protected-access
        return super().run(key, row)
