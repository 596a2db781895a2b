"""Salience colours (sequence_salience/display/palette.py) on the cases shared with the browser.

tests/data/colour_cases.json is read here and by frontend/test/colour_cases.test.ts
(frontend/src/shared/colormap.ts); test_display.py also runs both on many seeded values and compares.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from sequence_salience.display import palette

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "tests/data/colour_cases.json").read_text(encoding="utf-8"))


def _nan(v):
    return float("nan") if v is None else v


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["color_for"]])
def test_colour_of_a_value(case):
    scale = palette.ColorScale(case["signed"], case["scale"], case["intensity"])
    assert palette.color_for(_nan(case["value"]), scale) == (case["background"], case["text"])


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["legend_stops"]])
def test_legend_stops(case):
    scale = palette.ColorScale(case["signed"], case["scale"], case["intensity"])
    assert [list(s) for s in palette.legend_stops(scale, case["n"])] == case["stops"]


@pytest.mark.parametrize(("value", "text"), DATA["format_value"])
def test_format_value(value, text):
    assert palette.format_value(_nan(value)) == text


@pytest.mark.parametrize(("values", "expected"), DATA["max_abs"])
def test_max_abs(values, expected):
    assert palette.max_abs([_nan(v) for v in values]) == expected
