"""check_evaluation: a RowEvaluation read back from a file (a resume file), checked field by field.

A saved row is reused by `evaluate` when its fingerprint matches, and its numbers and names go
into summary.json and report.html. A file edited by hand (or crafted) must not crash the run
nor put its text into the report: every field the summary and the report read is checked for
its type (an int is an int, not a string or a bool; a number is an int or a float), every
curve, method, baseline and mode name for its spelling (NAME_RE: what the method registry and
the faithfulness library produce; modes from explain.faithfulness.MODES), and the structure
the summary relies on (every gap has its curves, every curve as many points as n_removed; the
upper bound's fields "upper_bound", "decidable" and "upper_bound_rows" all or none, with a number,
a bool per mode and the "upper_bound" curve in every mode).
The first problem found is a SalienceError naming the field's path, e.g.
`evaluation.gaps.deletion.grad_norm.random: expected a number, got str '<script>...'`.

Fields the summary and the report never read (e.g. "target", "orderings", "row_verdicts") are
checked for their type too, and unknown extra fields are ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from sequence_salience.errors import SalienceError
from sequence_salience.explain.faithfulness import MODES, UPPER

BOUND_FIELDS = ("upper_bound", "decidable", "upper_bound_rows")  # evaluate_row's upper-bound fields
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,99}$")  # method / curve / baseline names
_SHOW = 60  # characters of a bad value quoted in the message


def _where(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _bad(path: tuple[str, ...], expected: str, value: Any) -> SalienceError:
    text = repr(value)
    text = text if len(text) <= _SHOW else text[:_SHOW] + "…"
    return SalienceError(f"{_where(path)}: expected {expected}, got {type(value).__name__} {text}")


def _int(value: Any, path: tuple[str, ...], minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _bad(path, f"an integer >= {minimum}", value)
    return value


def _number(value: Any, path: tuple[str, ...], finite: bool = False) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (finite and not math.isfinite(value)):
        raise _bad(path, "a finite number" if finite else "a number", value)
    return float(value)


def _str(value: Any, path: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise _bad(path, "a string", value)
    return value


def _name(value: Any, path: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise _bad(path, "a name of letters, digits and _ . : + -", value)
    return value


def _dict(value: Any, path: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(path, "an object", value)
    return value


def _list(value: Any, path: tuple[str, ...], min_len: int = 0) -> list:
    if not isinstance(value, list) or len(value) < min_len:
        raise _bad(path, f"a list of at least {min_len}", value)
    return value


def _get(obj: Mapping[str, Any], key: str, path: tuple[str, ...]) -> Any:
    if key not in obj:
        raise SalienceError(f"{_where(path + (key,))}: missing")
    return obj[key]


def _names(obj: Mapping[str, Any], path: tuple[str, ...]) -> list[str]:
    for key in obj:
        _name(key, path + (str(key),))
    return list(obj)


def _curve(mode_curves: Mapping[str, Any], name: str, path: tuple[str, ...], n_points: int) -> None:
    """One curve {logprobs: [n_points numbers], aopc: number} under `name`."""
    c = _dict(_get(mode_curves, name, path), path + (name,))
    where = path + (name,)
    logprobs = _list(_get(c, "logprobs", where), where + ("logprobs",))
    if len(logprobs) != n_points:
        raise SalienceError(f"{_where(where + ('logprobs',))}: {len(logprobs)} points, but n_removed has "
                            f"{n_points}")
    for i, v in enumerate(logprobs):
        _number(v, where + ("logprobs", str(i)))
    _number(_get(c, "aopc", where), where + ("aopc",))


def check_evaluation(evaluation: Any, path: tuple[str, ...] = ("evaluation",)) -> None:
    """SalienceError naming the first field of `evaluation` (a RowEvaluation) that is not as written
    by evaluate_row (see the module docstring)."""
    ev = _dict(evaluation, path)
    _str(_get(ev, "target", path), path + ("target",))
    if not isinstance(_get(ev, "generated", path), bool):
        raise _bad(path + ("generated",), "true or false", ev["generated"])
    for key in ("num_targets", "n_prompt_tokens", "n_segments"):
        _int(_get(ev, key, path), path + (key,))
    for key in ("original_logprob", "empty_logprob"):
        _number(_get(ev, key, path), path + (key,))
    n_removed = _list(_get(ev, "n_removed", path), path + ("n_removed",), 1)
    for i, n in enumerate(n_removed):
        _int(n, path + ("n_removed", str(i)))
    baselines = _list(_get(ev, "baselines", path), path + ("baselines",))
    for i, b in enumerate(baselines):
        _name(b, path + ("baselines", str(i)))

    curves = _dict(_get(ev, "curves", path), path + ("curves",))
    gaps = _dict(_get(ev, "gaps", path), path + ("gaps",))
    if not gaps:
        raise SalienceError(f"{_where(path + ('gaps',))}: empty (no mode)")
    methods: list[str] | None = None
    bounded = any(k in ev for k in BOUND_FIELDS)  # the upper bound's fields come together, with its curves
    for mode in _names(gaps, path + ("gaps",)):
        if mode not in MODES:
            raise _bad(path + ("gaps", mode), f"a mode in {list(MODES)}", mode)
        by_method = _dict(gaps[mode], path + ("gaps", mode))
        names = _names(by_method, path + ("gaps", mode))
        if not names or (methods is not None and names != methods):
            raise SalienceError(f"{_where(path + ('gaps', mode))}: the methods {names} differ from another mode's "
                                f"{methods} (or are none)")
        methods = names
        mode_curves = _dict(_get(curves, mode, path + ("curves",)), path + ("curves", mode))
        for m in names:
            by_base = _dict(by_method[m], path + ("gaps", mode, m))
            if sorted(by_base) != sorted(baselines):
                raise SalienceError(f"{_where(path + ('gaps', mode, m))}: baselines {sorted(by_base)} differ from "
                                    f"evaluation.baselines {sorted(baselines)}")
            for b in baselines:
                _number(by_base[b], path + ("gaps", mode, m, b))
        for name in names + baselines + ([UPPER] if bounded else []):
            _curve(mode_curves, name, path + ("curves", mode), len(n_removed))
    for name in _names(curves, path + ("curves",)):
        _dict(curves[name], path + ("curves", name))

    if bounded:
        bound = _dict(_get(ev, "upper_bound", path), path + ("upper_bound",))
        decidable = _dict(_get(ev, "decidable", path), path + ("decidable",))
        _int(_get(ev, "upper_bound_rows", path), path + ("upper_bound_rows",))
        for mode in gaps:
            _number(_get(bound, mode, path + ("upper_bound",)), path + ("upper_bound", mode))
            if not isinstance(_get(decidable, mode, path + ("decidable",)), bool):
                raise _bad(path + ("decidable", mode), "true or false", decidable[mode])
    if "orderings" in ev:
        for name, how in _dict(ev["orderings"], path + ("orderings",)).items():
            _str(how, path + ("orderings", _name(name, path + ("orderings", str(name)))))
    if "row_verdicts" in ev:
        for mode, by_name in _dict(ev["row_verdicts"], path + ("row_verdicts",)).items():
            for name, v in _dict(by_name, path + ("row_verdicts", str(mode))).items():
                _str(v, path + ("row_verdicts", str(mode), str(name)))
    if "reduction" in ev:
        for m in _names(_dict(ev["reduction"], path + ("reduction",)), path + ("reduction",)):
            if m not in (methods or ()):
                raise _bad(path + ("reduction", m), f"a method of evaluation.gaps {methods}", m)
            r = _dict(ev["reduction"][m], path + ("reduction", m))
            where = path + ("reduction", m)
            _int(_get(r, "kept", where), where + ("kept",))
            _int(_get(r, "n_segments", where), where + ("n_segments",))
            _number(_get(r, "kept_fraction", where), where + ("kept_fraction",))
            _str(_get(r, "stopped_by", where), where + ("stopped_by",))
    if "ig_completeness" in ev:
        where = path + ("ig_completeness",)
        ig = _dict(ev["ig_completeness"], where)
        _int(_get(ig, "steps", where), where + ("steps",), 1)
        _number(_get(ig, "relative_error", where), where + ("relative_error",))
        _number(_get(ig, "delta", where), where + ("delta",))
