"""Top segments (sequence_salience/display/view.py top_segments) on the cases shared with the browser.

tests/data/ranking_cases.json is read here and by frontend/test/ranking_cases.test.ts
(frontend/src/salience/rank.ts topSegments).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from sequence_salience.display.view import top_segments

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "tests/data/ranking_cases.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["cases"]])
def test_shared_ranking_case(case):
    values = np.array([np.nan if v is None else v for v in case["values"]], dtype=np.float64)
    got = top_segments(values, case["k"], case["signed"], frozenset(case["skip"]))
    assert [[s, v] for s, v in got] == case["top"]
