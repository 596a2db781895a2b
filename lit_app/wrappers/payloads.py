"""The `salience` payload of the salience model (docs/architecture.md, "LIT salience payload").

`salience_payload` turns a core `SalienceResult` (complete or partial) into the JSON the
browser reads; `compact` rounds floats for short JSON (the explain and inside payloads use
it too); `pack_gram` packs a Gram tensor's upper triangle (grad_norm's). What a method's entry
carries besides its matrix comes from its record: its count under its unit, and each result extra
that names a `payload` key (methods/base.py ResultExtra).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

import sequence_salience as ss
from sequence_salience.display.view import completeness_check, completeness_tolerance
from sequence_salience.methods import all_records, get_any_method
from sequence_salience.methods.base import ResultExtra
from lit_app.schema import fields
from lit_app.schema.inputs import JsonDict
from lit_app.schema.method_registry import EXTRA_BY_METHOD

# Largest packed Gram payload (an "LTT" result extra) shipped to the client (floats); beyond it the
# client asks for spans with `target_span` instead.
MAX_GRAM_PACKED_VALUES = 2_000_000
SIGNIFICANT_DIGITS = 6


def method_signed(name: str) -> bool:
    """Whether the core method `name` gives signed values (a diverging colour map)."""
    return bool(ss.get_method(name).signed)


def compact(a: np.ndarray, digits: int = SIGNIFICANT_DIGITS) -> list:
    """Nested lists of floats rounded to `digits` significant digits (short JSON)."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.where(a == 0, 0.0, np.floor(np.log10(np.abs(a))))
        scale = np.power(10.0, digits - 1 - mag)
        out = np.where(np.isfinite(a) & (a != 0), np.round(a * scale) / scale, a)
    return np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0).tolist()


def pack_gram(gram: np.ndarray) -> np.ndarray:
    """<float>[N, T, T] -> <float>[N, T*(T+1)/2]: upper triangle, row-major ((0,0),(0,1),..,(1,1),..)."""
    t = gram.shape[-1]
    rows, cols = np.triu_indices(t)
    return gram[:, rows, cols]


def extra_payload(extra: ResultExtra, value: np.ndarray | None, matrix: np.ndarray | None) -> list | None:
    """A result extra's value in its method's entry: null without the method's matrix or the extra; an "LTT" array
    (a Gram tensor) packed to its upper triangle, null past MAX_GRAM_PACKED_VALUES floats."""
    if value is None or matrix is None:
        return None
    if extra.axes == "LTT":
        n_tokens, n_targets = matrix.shape[1], matrix.shape[0]
        if n_tokens * n_targets * (n_targets + 1) // 2 > MAX_GRAM_PACKED_VALUES:
            return None
        return compact(pack_gram(np.asarray(value)))
    return compact(value)


def span_key(t0: int, t1: int) -> str:
    """The payload key of target span (t0, t1): "t0:t1"."""
    return f"{int(t0)}:{int(t1)}"


def completeness_payload(result: Any) -> JsonDict:
    """The `completeness` field: for each method whose record names an `error_extra` (IG), the tolerance its values
    are checked against and, for each target span of the result with its values (the spans computed directly; the
    whole response and each response token, a row of the answer x prompt matrix, once the matrix exists), the check
    (display/view.py CompletenessCheck): {"tolerance": 0.05, "spans": {"t0:t1": {"error", "change", "relative" (null
    without a change), "rejected"}}}. The browser reads these verdicts and derives none."""
    spans = set(getattr(result, "spans", {}) or {}) | set(getattr(result, "span_ig_errors", {}) or {})
    out: JsonDict = {}
    for record in (r for r in all_records() if getattr(r, "error_extra", None) is not None):
        name = record.name
        t = result.num_targets
        rows = {(0, t), *((k, k + 1) for k in range(t))} if name in result.matrices else set()
        targets = sorted(spans | rows)
        checks = {k: completeness_check(result, name, k) for k in targets if result.has_span(name, *k)}
        out[name] = {"tolerance": completeness_tolerance(result), "spans": {
            span_key(*k): {"error": c.error, "change": c.change, "relative": c.relative, "rejected": c.rejected}
            for k, c in checks.items() if c is not None}}
    return out


def salience_payload(result: Any, counts: Mapping[str, int] | None = None, methods: Iterable[str] | None = None,
                     detail: Mapping[str, Any] | None = None, dtype: str = "") -> JsonDict:
    """The `salience` field: exactly the payload of docs/architecture.md.

    A partial result (spans computed directly, no matrices yet) gives `"matrix": null`
    for its methods and carries its values under "spans"; `detail` says how far the
    background computation of the matrices has come. `counts` ({count field: count}, absent = 0)
    are the counts the extra methods' entries carry, under their unit ("steps", "samples").
    """
    counts = counts or {}
    spans = getattr(result, "spans", {}) or {}
    names = list(methods) if methods is not None else list(result.matrices)
    for m in (m for v in spans.values() for m in v):
        if m not in names:
            names.append(m)
    out_methods: JsonDict = {}
    for name in names:
        matrix = result.matrices.get(name)
        entry: JsonDict = {"signed": method_signed(name), "matrix": None if matrix is None else compact(matrix)}
        counted = EXTRA_BY_METHOD.get(name)
        if counted is not None:
            entry[counted.unit] = int(counts.get(counted.field, 0))
        for extra in (e for e in get_any_method(name).result_extras if e.payload):  # a Gram tensor, IG's error
            value = (getattr(result, "extras", None) or {}).get(extra.name)
            entry[extra.payload] = extra_payload(extra, value, matrix)
        out_methods[name] = entry
    payload = {
        "text": result.text,
        "prompt_end": int(result.prompt_end),
        "tokens": list(result.tokens),
        "offsets": np.asarray(result.offsets, dtype=np.int64).reshape(-1, 2).tolist(),
        "special": [bool(s) for s in result.special],
        "n_prompt_tokens": int(result.n_prompt_tokens),
        "role_spans": [[int(s), int(e), str(r)] for s, e, r in result.role_spans],
        "target_logprobs": compact(result.target_logprobs),
        "methods": out_methods,
        "spans": {span_key(*k): {m: compact(v) for m, v in vals.items()} for k, vals in spans.items()},
        "span_ig_errors": {span_key(*k): float(v) for k, v in (getattr(result, "span_ig_errors", {}) or {}).items()},
        "completeness": completeness_payload(result),
    }
    if detail is not None:
        payload["detail"] = dict(detail)
    if dtype:
        payload["dtype"] = dtype
    return payload


def segment_payload(seg: Any, count: int, detail: Mapping[str, Any] | None = None) -> JsonDict:
    """The `salience` field of a finished segment request (docs/architecture.md, "Segment salience"):
    `fields.SEGMENTS` holds the method's values per removable segment, their character spans and
    indices into the segmentation, the values spread over tokens, the fit quality, warning and cost; where
    coarse_to_fine left segments unmeasured, `measured` <bool>[S], `coarse_values` (the value of the coarser unit
    holding each unmeasured segment, null where measured) and `coarse_granularity` ("" where measured)."""
    stats = seg.stats
    out: JsonDict = {fields.SEGMENTS: {
        "method": seg.method, "granularity": seg.granularity, "pattern": seg.pattern, "removal": seg.removal,
        "span": [int(seg.span[0]), int(seg.span[1])], "count": int(count),
        "values": compact(seg.values),
        "spans": [[int(s), int(e)] for s, e in seg.segments],
        "segment_index": [int(i) for i in seg.segment_index],
        "token_values": compact(seg.token_values()),
        "original_logprob": float(seg.original_logprob),
        "quality": {k: (float(v) if np.isfinite(v) else None) for k, v in seg.quality.items()},
        "warning": seg.warning,
        "stats": {"rows": int(stats.rows), "tokens": int(stats.tokens), "tokens_computed": int(stats.computed),
                  "prefix_reuse": bool(stats.reuse), "saved": round(float(stats.saved), 4)},
    }}
    measured = seg.measured_mask()
    if not measured.all():  # coarse_to_fine left units unrefined: which values were measured, and the units' values
        out[fields.SEGMENTS].update({
            "measured": [bool(m) for m in measured],
            "coarse_values": [None if m else float(v) for m, v in zip(measured, seg.coarse_values)],
            "coarse_granularity": [str(g) for g in seg.coarse_granularity]})
    if detail is not None:
        out["detail"] = dict(detail)
    return out
