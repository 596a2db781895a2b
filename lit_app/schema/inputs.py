"""Parsing of the LIT model inputs shared by the wrappers: one function per input field.

Each parser reads one field of an input example (a JSON object as LIT passes it) and
returns its value, or raises `RequestError` with a one-line message that names the field
and the fix. `datapoint_group` says which datapoint a request is about without the model
(background jobs and the blocking requests' cancel check are keyed by it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sequence_salience import aggregate
from sequence_salience import methods as core_methods
from sequence_salience.errors import SalienceError
from sequence_salience.field_rules import FieldError, FieldRule
from sequence_salience.methods.base import SEGMENT_REMOVALS
from lit_app.schema import fields
from lit_app.errors import RequestError
from lit_app.schema.method_registry import (EXTRA_METHODS, SEGMENT_DETAIL, SEGMENT_JOB_TAG, SEGMENT_KNOWN_DETAIL,
                                            ExtraMethod)

JsonDict = Mapping[str, Any]


def text_field(ex: JsonDict, name: str, required: bool = False) -> str:
    """The string of input field `name`; absent -> "" (RequestError when `required`)."""
    value = ex.get(name)
    if value is None:
        if required:
            raise RequestError(
                f'Input field "{name}" is missing. Fix: send {{"{name}": "..."}} in each input.'
            )
        return ""
    if not isinstance(value, str):
        raise RequestError(f'Input field "{name}" must be a string, got {type(value).__name__}.')
    return value


def job_id_field(ex: JsonDict, name: str, detail: str) -> str:
    """The job id in input field `name` of a `detail` cancel (fields.SPAN_JOB, fields.MATRIX_JOB); RequestError
    when it is missing or empty: a cancel names the job it stops."""
    value = text_field(ex, name)
    if not value:
        raise RequestError(f'Input field "{name}" is missing; with "{fields.DETAIL}": "{detail}" send the id of the'
                           ' job to stop, as its status named it ("job_id").')
    return value


def choice_field(ex: JsonDict, name: str, choices: Sequence[str], default: str | None, what: str = "") -> str:
    """Input field `name`, one of `choices`; absent or "" -> `default` (None: the field is required). A value of
    another type (3, a list) is refused as an unknown string is: the message names the choices (and `what`)."""
    value = ex.get(name)
    if value is None or value == "":
        if default is not None:
            return default
    elif isinstance(value, str) and value in choices:
        return value
    shown = "missing" if value is None or value == "" else repr(value)
    raise RequestError(f'Input field "{name}" is {shown}; use one of {", ".join(choices)}{what}.')


def chat_field(ex: JsonDict) -> bool | None:
    """The `chat` field: True / False (also "true" / "false"); absent or "" -> None."""
    value = ex.get(fields.CHAT)
    if value is None or value == "":
        return None  # the core library decides: the chat template when there is one
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise RequestError(f'Input field "{fields.CHAT}" must be true or false, got {value!r}.')


def rule_field(ex: JsonDict, rule: FieldRule, off: bool = False, default: int | float | None = None) -> int | float:
    """Input field `rule.name` checked against its rule (sequence_salience/field_rules.py); absent or "" ->
    `default` (the rule's own when None; 0 with `off`: a counted method switched off, which 0 also means)."""
    value = ex.get(rule.name)
    if value is None or value == "":
        return (0 if off else rule.default) if default is None else default
    try:
        return rule.parse(value, off=off)
    except FieldError as e:
        raise RequestError(f'Input field "{rule.name}" is {e}.') from None


def int_field(ex: JsonDict, name: str, default: int, lo: int, hi: int) -> int:
    """Input field `name` as a whole number in [lo, hi]; absent or "" -> `default`."""
    value = ex.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):  # JSON true/false are not numbers here (float(True) would read 1)
        raise RequestError(f'Input field "{name}" must be a whole number, got {value!r}.')
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RequestError(f'Input field "{name}" must be a whole number, got {value!r}.') from None
    if number != int(number) or not lo <= number <= hi:
        raise RequestError(f'Input field "{name}" is {value!r}; use a whole number from {lo} to {hi}.')
    return int(number)


def whole_number(value: Any) -> int | None:
    """An int for 3, 3.0, "3"; None for anything else (bools, 1.5, "x")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return whole_number(float(value.strip()))
        except ValueError:
            return None
    return None


def extra_counts(ex: JsonDict) -> dict[str, int]:
    """{count field: count} for every extra method, e.g. {"ig_steps": 16, "smooth_grad_samples": 0}."""
    return {extra.field: int(rule_field(ex, extra.rule, off=True)) for extra in EXTRA_METHODS}


DETAIL_MODES = (("", "span", "poll", "stream", "span_progress", "span_cancel", "matrix_cancel", "page_closed")
                + tuple(e.matrix_detail for e in EXTRA_METHODS) + (SEGMENT_DETAIL, SEGMENT_KNOWN_DETAIL))


def detail_field(ex: JsonDict) -> str:
    """The `detail` field, one of DETAIL_MODES; absent -> "" (every matrix at once)."""
    value = ex.get(fields.DETAIL)
    if value is None:
        return ""
    if not isinstance(value, str) or value not in DETAIL_MODES:
        matrices = " or ".join(f'"{e.matrix_detail}"' for e in EXTRA_METHODS)
        raise RequestError(
            f'Input field "{fields.DETAIL}" is {value!r}; use one of "" (all matrices at once),'
            f' "span" (first highlight), "poll" (progress of the matrices), "stream" (the response generated so far),'
            f' "span_progress" (progress of the span being computed), "span_cancel" (stop it),'
            f' "matrix_cancel" (stop a per-token matrix job), "page_closed" (stop the page\'s background jobs),'
            f' "{SEGMENT_DETAIL}" (a segment method), "{SEGMENT_KNOWN_DETAIL}" (its segments known exactly already)'
            f" or {matrices}."
        )
    return value


def job_extra(counts: Mapping[str, int], detail: str) -> ExtraMethod | None:
    """The extra method whose background job a "poll" or "<method>_matrix" request is about; None: the gradients."""
    if detail != "poll":
        extra = next(e for e in EXTRA_METHODS if e.matrix_detail == detail)
        if not counts[extra.field]:
            raise RequestError(f'"{detail}" needs "{extra.field}" > 0 (the number of {extra.unit}).')
        return extra
    asked = [e for e in EXTRA_METHODS if counts[e.field]]
    if len(asked) > 1:
        names = " and ".join(f'"{e.field}"' for e in asked)
        raise RequestError(f'A "poll" request follows one job, but {names} are both > 0.'
                           " Fix: send only the count of the method whose matrix you poll (0 or absent for the others).")
    return asked[0] if asked else None


def parse_target_span(value: Any, n_targets: int) -> tuple[int, int] | None:
    """Parses "t0:t1" (target-token indices, end exclusive); "" or None -> None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(value))
    if not m:
        raise RequestError(
            f'Input field "{fields.TARGET_SPAN}" is {value!r}; write "t0:t1" with target-token'
            f" indices, e.g. \"0:{max(n_targets, 1)}\"."
        )
    t0, t1 = int(m.group(1)), int(m.group(2))
    if not 0 <= t0 < t1 <= n_targets:
        if t0 >= t1:  # the length may not be known yet (a progressive span: checked once tokenized)
            raise RequestError(f'Input field "{fields.TARGET_SPAN}" is "{t0}:{t1}"; the end must be after the'
                               f' start: use t0 < t1, e.g. "{t0}:{t0 + 1}".')
        raise RequestError(
            f'Input field "{fields.TARGET_SPAN}" is "{t0}:{t1}" but the target has {n_targets}'
            f" token(s); use 0 <= t0 < t1 <= {n_targets}."
        )
    return t0, t1


def datapoint_group(ex: JsonDict) -> tuple:
    """Which datapoint a request is about, without the model (polls must not wait for it)."""
    return (text_field(ex, fields.PROMPT), text_field(ex, fields.SYSTEM), repr(chat_field(ex)),
            text_field(ex, fields.TARGET))


@dataclasses.dataclass(frozen=True)
class SegmentRequest:
    """What a segment method's request (`detail` = method_registry.SEGMENT_DETAIL) asks for.

    span: (t0, t1) target tokens as sent, or None (the whole target); count: the method's count (the
    surrogate's random ablations), 0 for a method without one. Together with the datapoint it is the
    cache key of the values (lit_app/model/salience_runs.py `segment_salience`).
    """

    method: str
    granularity: str
    pattern: str | None
    removal: str
    span: tuple[int, int] | None
    count: int

    @property
    def job_kind(self) -> str:
        """The background job's kind: every setting that changes the values."""
        span = "all" if self.span is None else f"{self.span[0]}:{self.span[1]}"
        return f"{SEGMENT_JOB_TAG}{self.method}#{self.count}@{self.granularity}/{self.pattern or ''}/{self.removal}/{span}"


def segment_request(ex: JsonDict) -> SegmentRequest:
    """Parses a segment method's request; RequestError naming the field for an unknown method, granularity,
    removal, a bad pattern or count."""
    method = choice_field(ex, fields.SEGMENT_METHOD, core_methods.list_segment_methods(), None,
                          " (the segment methods)")
    granularity = choice_field(ex, fields.GRANULARITY, aggregate.GRANULARITIES, "sentence")
    pattern = text_field(ex, fields.PATTERN) or None
    if granularity == "regex":
        if pattern is None:
            raise RequestError(f'Input field "{fields.PATTERN}" is empty, but "{fields.GRANULARITY}" is "regex".'
                               " Fix: send the regular expression whose matches are the segments.")
        try:
            aggregate.compile_pattern(pattern)
        except SalienceError as e:
            raise RequestError(f'Input field "{fields.PATTERN}": {e}') from None
    else:
        pattern = None  # only regex segments have one: the same values whatever the field holds
    removal = choice_field(ex, fields.REMOVAL, SEGMENT_REMOVALS, "filler")
    span = parse_target_span(ex.get(fields.TARGET_SPAN), 1 << 30)
    rule = fields.SEGMENT_COUNT_RULES.get(method)
    count = 0 if rule is None else int(rule_field(ex, rule))
    return SegmentRequest(method, granularity, pattern, removal, span, count)
