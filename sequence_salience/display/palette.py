"""Salience colours, the same as the browser module's (`frontend/src/shared/colormap.ts`).

Diverging (blue, white, red) for signed methods, sequential (white to purple)
for unsigned ones. A value is divided by a scale (the largest magnitude shown)
and multiplied by an intensity, then clipped; colours are quantised to LEVELS
steps per sign. Every function here mirrors the TypeScript function of the
same name (snake_case) and returns the same strings, rounding included
(JavaScript's `Math.round` rounds halves up; `toPrecision`/`toExponential`
round decimal ties away from zero); both read the hand-derived cases of
`tests/data/colour_cases.json`, and `tests/unit/test_display.py` runs both on many
seeded values with node and compares.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
from collections.abc import Iterable

RGB = tuple[int, int, int]

WHITE: RGB = (255, 255, 255)
# Diverging end points (ColorBrewer RdBu ends, slightly lightened).
NEGATIVE: RGB = (33, 102, 172)
POSITIVE: RGB = (178, 24, 43)
# Sequential end point (ColorBrewer Purples, darkest).
SEQUENTIAL: RGB = (84, 39, 143)
# Colour levels per sign.
LEVELS = 64


@dataclasses.dataclass(frozen=True)
class ColorScale:
    """signed: diverging map; scale: value shown at full colour at intensity 1 (> 0); intensity: > 0."""

    signed: bool
    scale: float
    intensity: float = 1.0


def js_round(x: float) -> int:
    """JavaScript's Math.round: halves round towards +infinity."""
    return int(math.floor(x + 0.5))


def max_abs(values: Iterable[float]) -> float:
    """Largest finite |v|, or 1 when there is none or all are zero."""
    m = 0.0
    for v in values:
        a = abs(float(v))
        if a > m and math.isfinite(a):
            m = a
    return m if m > 0 else 1.0


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return (
        js_round(a[0] + (b[0] - a[0]) * t),
        js_round(a[1] + (b[1] - a[1]) * t),
        js_round(a[2] + (b[2] - a[2]) * t),
    )


def normalize(v: float, cs: ColorScale) -> float:
    """Position on the colour map: [-1, 1] for signed maps, [0, 1] for sequential ones."""
    v = float(v)
    if not math.isfinite(v):
        return 0.0
    x = (v / cs.scale) * cs.intensity
    return max(-1.0, min(1.0, x)) if cs.signed else max(0.0, min(1.0, x))


def color_at(x: float, signed: bool) -> RGB:
    """Colour at a normalised position (see normalize)."""
    if not signed:
        return _mix(WHITE, SEQUENTIAL, max(0.0, min(1.0, x)))
    return _mix(WHITE, POSITIVE, min(1.0, x)) if x >= 0 else _mix(WHITE, NEGATIVE, min(1.0, -x))


def to_css(c: RGB) -> str:
    return f"rgb({c[0]}, {c[1]}, {c[2]})"


def luminance(c: RGB) -> float:
    """Relative luminance (WCAG), 0 (black) to 1 (white)."""

    def lin(u: int) -> float:
        s = u / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2])


def text_color_on(bg: RGB) -> str:
    """Text colour readable on the given background."""
    return "#202124" if luminance(bg) > 0.35 else "#ffffff"


def quantized_color(v: float, cs: ColorScale) -> RGB:
    """The background colour of one value, quantised to LEVELS steps (as color_for)."""
    return color_at(js_round(normalize(v, cs) * LEVELS) / LEVELS, cs.signed)


def color_for(v: float, cs: ColorScale) -> tuple[str, str]:
    """(background, text colour) CSS strings for one value."""
    c = quantized_color(v, cs)
    return to_css(c), text_color_on(c)


def legend_stops(cs: ColorScale, n: int = 5) -> list[tuple[float, str]]:
    """(value, css colour) stops left to right: signed maps span ±scale/intensity, sequential [0, scale/intensity]."""
    hi = cs.scale / cs.intensity
    lo = -hi if cs.signed else 0.0
    return [
        (value, to_css(color_at(normalize(value, cs), cs.signed)))
        for value in (lo + ((hi - lo) * k) / (n - 1) for k in range(n))
    ]


def legend_gradient(cs: ColorScale) -> str:
    """CSS linear-gradient for the legend bar."""
    return f"linear-gradient(to right, {', '.join(c for _, c in legend_stops(cs, 9))})"


def _round_sig(v: float, digits: int) -> tuple[str, int]:
    """|v| rounded to `digits` significant digits, ties away from zero: (digit string, exponent)."""
    d = decimal.Decimal(abs(v))  # exact binary value
    exp = d.adjusted()
    q = d.scaleb(-exp).quantize(decimal.Decimal(1).scaleb(1 - digits), rounding=decimal.ROUND_HALF_UP)
    if q >= 10:  # 9.9995 -> 10.00
        exp += 1
        q = d.scaleb(-exp).quantize(decimal.Decimal(1).scaleb(1 - digits), rounding=decimal.ROUND_HALF_UP)
    return str(q).replace(".", ""), exp


def _to_exponential(v: float, frac: int) -> str:
    """JavaScript's Number.prototype.toExponential(frac)."""
    digits, exp = _round_sig(v, frac + 1)
    sign = "-" if v < 0 else ""
    mantissa = digits[0] + ("." + digits[1:] if frac > 0 else "")
    return f"{sign}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp)}"


def _to_precision(v: float, p: int) -> str:
    """JavaScript's Number.prototype.toPrecision(p) for finite non-zero v."""
    digits, exp = _round_sig(v, p)
    sign = "-" if v < 0 else ""
    if exp < -6 or exp >= p:
        return sign + digits[0] + ("." + digits[1:] if p > 1 else "") + f"e{'+' if exp >= 0 else '-'}{abs(exp)}"
    if exp >= 0:
        head, tail = digits[: exp + 1], digits[exp + 1:]
        return sign + head + ("." + tail if tail else "")
    return sign + "0." + "0" * (-exp - 1) + digits


def format_value(v: float) -> str:
    """Compact, exact-enough formatting for values in tooltips and legends (as formatValue)."""
    v = float(v)
    if v == 0:
        return "0"
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return _to_exponential(v, 3)
    return _to_precision(v, 4)
