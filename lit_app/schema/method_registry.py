"""The salience methods as the LIT layer serves them: the core registry plus the LIT facts per method.

The core registry (`sequence_salience.methods`, `registry_json()`) is the single source of
every method's name, label, short name, signedness, linearity, count field and unit, default
count and cost unit. For each token method with a count (computed only when a request sets its
count field > 0), the LIT layer reads from the record (`job_kind`, `matrix_job_detail`):

* `tag`: the background job's kind prefix; the job of count n is f"{tag}{n}" ("ig16", "sg8").
* `matrix_detail`: the `detail` value that starts the method's per-token matrix job.
* `max_count`: the largest count a request may ask for: the `hi` of the method's count rule
  (sequence_salience/field_rules.py; the HTTP edge may allow fewer, see lit_app/edge/limits.py).

`EXTRA_METHODS` holds those methods as records for the wrappers (input parsing, payloads, the
shared model, the salience wrapper, the HTTP limits), in the registry's display order.
`published_registry()` is the merged list the server publishes to the browser in the salience
model's output spec (`fields.METHOD_REGISTRY`; shape in docs/architecture.md, "Method
registry"), so that no TypeScript module spells a method name or label of its own.

No method name is spelled here: the LIT facts are keyed by the method modules' `NAME`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from sequence_salience import first_map
from sequence_salience import methods as core_methods
from sequence_salience.errors import SalienceError
from sequence_salience.field_rules import FieldRule
from sequence_salience.methods import coarse_to_fine, leave_one_out, word_verified

# ---------------------------------------------------------------------------
# Segment methods (kind "segment": their values live on one segmentation; lit_app/wrappers/salience.py runs them
# as background jobs, docs/architecture.md "Segment salience").
# The `detail` value of a segment request: it starts the job (or finds it) and answers its progress, then
# its values; the same request polls.
SEGMENT_DETAIL = "segments"
# The `detail` value that asks, without starting a job or waiting for the model, how many of the request's segments
# the server holds exact values for from another exact method (salience_runs.py `exact_values_of`: leave one out
# takes them and scores only the others), so that a page that did not run that method states the forwards that run.
SEGMENT_KNOWN_DETAIL = "segments_known"
# The background job's kind prefix; a new segment job of a datapoint cancels its live older ones.
SEGMENT_JOB_TAG = "seg:"
# What the salience module shows once its forwards finish, per granularity (after the gradient's first
# highlight): the lead's choice from docs/benchmarks.md's evaluation table. A granularity absent here
# (token, word, regex) keeps the gradient; there a segment method is computed only on request.
DEFAULT_SEGMENT_METHOD: dict[str, str] = {
    "sentence": leave_one_out.NAME, "paragraph": leave_one_out.NAME, "line": leave_one_out.NAME,
    "role": leave_one_out.NAME,
}

# At the granularities where a segment method is measured only on request (one forward per word or token is many),
# the method the module's "measure" button runs by default, the segment method on screen (leave one word out)
# staying one click away. Word: word_verified estimates every word, then measures the best quarter (issue 42: full
# leave one word out's top five within a quarter of its forwards on 17 of 19 held-out prompts, docs/benchmarks.md
# "Session 38 (h3)"; coarse-to-fine spent 36-51 %). Token: coarse-to-fine (sentences, then words, then tokens inside
# those that matter): word_verified's estimate and rule were fitted and chosen on words only.
REQUEST_SEGMENT_METHOD: dict[str, str] = {"word": word_verified.NAME, "token": coarse_to_fine.NAME}

# The first map at each coarse granularity while DEFAULT_SEGMENT_METHOD (exact leave-one-out) measures: the method
# the first-map rule chooses from the held-out agreement figures (sequence_salience/first_map.py), None where the
# gradient stays the first map.
FIRST_MAP_METHOD: dict[str, str | None] = first_map.first_map_methods()
# Where the first map's job sends its first look (its record's first_look: attention_verified's estimate) while it
# runs, before its own values: where those held-out figures are no worse than the gradient's (first_map.py
# `choose_first_looks`); None: its values only.
FIRST_LOOK_METHOD: dict[str, str | None] = first_map.first_look_methods()


@dataclasses.dataclass(frozen=True)
class LitFacts:
    """What the LIT layer adds to a counted method (see the module docstring)."""

    tag: str
    matrix_detail: str


# Each counted token method's facts, read from its record (the wire values its module declares: the browser,
# scripts and saved URLs send them).
LIT_FACTS: dict[str, LitFacts] = {m.name: LitFacts(m.job_kind, m.matrix_job_detail)
                                  for m in core_methods.counted(("token",))}


@dataclasses.dataclass(frozen=True)
class ExtraMethod:
    """A method computed only when a request asks for it, with a count (0 = off).

    Attributes:
      method: the core library's name.
      field: the input field carrying the count; also the `SalienceConfig` attribute it sets.
      kind: the background job's kind prefix (`tag`); the job of count n is f"{kind}{n}".
      matrix_detail: the `detail` value that starts its per-token matrix job.
      unit: what the count counts; the payload key of its method entry.
      rule: the count's rule (sequence_salience/field_rules.py): its range and default.
    """

    method: str
    field: str
    kind: str
    matrix_detail: str
    unit: str
    rule: FieldRule

    @property
    def maximum(self) -> int:
        """The largest count a request may ask for (`max_count`: the rule's `hi`)."""
        return int(self.rule.hi)

    @property
    def limit(self) -> str:
        """The `Limits` attribute and server flag (--max_<field>) bounding the count at the HTTP edge."""
        return f"max_{self.field}"


def extra_methods(facts: Mapping[str, LitFacts]) -> tuple[ExtraMethod, ...]:
    """The core registry's counted methods with their LIT `facts`, in display order; RuntimeError when a
    counted method has no facts or facts name a method without a count."""
    counted = [core_methods.get_method(name) for name in core_methods.list_methods()]
    counted = [m for m in counted if m.count_field]
    missing = [m.name for m in counted if m.name not in facts]
    stray = sorted(set(facts) - {m.name for m in counted})
    if missing or stray:
        raise RuntimeError(
            f"lit_app.schema.method_registry: counted methods without LIT facts {missing}, LIT facts for methods"
            f" without a count {stray}. Fix: give every core method with a count_field one LIT_FACTS entry.")
    return tuple(ExtraMethod(m.name, m.count_field, facts[m.name].tag, facts[m.name].matrix_detail, m.count_unit,
                             m.count) for m in counted)


EXTRA_METHODS: tuple[ExtraMethod, ...] = extra_methods(LIT_FACTS)


@dataclasses.dataclass(frozen=True)
class ServerSetting:
    """A segment method's setting the server takes as a flag of the field's own name (--attention_estimator):
    a settings field whose metadata names a CLI flag (methods/base.py SalienceMethod.settings).

    Attributes:
      name: the AblationConfig field and the server flag.
      default: the field's default.
      help: the flag's help (the field's metadata).
      check: None, or (value) -> None raising SalienceError naming the fix (the metadata's "check").
      type: the value's type: the metadata's "type" (float, int), else str.
    """

    name: str
    default: Any
    help: str
    check: Callable[[Any], None] | None = None
    type: type = str


# The segment methods' flagged settings, in display order: the server's flags and its AblationConfig read these.
SERVER_SETTINGS: tuple[ServerSetting, ...] = tuple(
    ServerSetting(f.name, f.default, f.metadata.get("help", ""), f.metadata.get("check"), f.metadata.get("type", str))
    for _, f in core_methods.flagged_settings(("segment",)))


def server_ablation_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """{field: value} of SERVER_SETTINGS from `values` (the parsed server flags, by name; absent: the default),
    each checked; SalienceError "--<name>: <the check's message>" for a value its method cannot use."""
    out = {}
    for setting in SERVER_SETTINGS:
        value = values.get(setting.name, setting.default)
        if setting.check is not None and value is not None:
            try:
                setting.check(value)
            except SalienceError as e:
                raise SalienceError(f"--{setting.name}: {e}") from None
        out[setting.name] = value
    return out
EXTRA_BY_METHOD: dict[str, ExtraMethod] = {e.method: e for e in EXTRA_METHODS}
# The input fields carrying the extra methods' counts, in display order.
COUNT_FIELDS: tuple[str, ...] = tuple(e.field for e in EXTRA_METHODS)


def _check_segment_facts() -> None:
    segment = set(core_methods.list_segment_methods())
    stray = (set(DEFAULT_SEGMENT_METHOD.values()) | set(REQUEST_SEGMENT_METHOD.values())) - segment
    if stray:
        raise RuntimeError(f"lit_app.schema.method_registry: segment facts out of step with the core registry: {sorted(stray)}."
                           " Fix: DEFAULT_SEGMENT_METHOD and REQUEST_SEGMENT_METHOD name segment methods.")


_check_segment_facts()


def published_registry() -> list[dict[str, Any]]:
    """Every method's core facts (`registry_json(kinds=("token", "segment"))`, all its keys) plus its LIT
    facts, in display order (token methods first):

    {name, label, short, signed, linear, count_field, count_unit, default_count, cost_unit, trust, kind, max_count,
    tag, matrix_detail, detail, known_detail, default_at, request_default_at, first_map_at, granularities, first_look,
    budget, exact_measured} (JSON-able); count_field, count_unit, max_count are None (null)
    for a method without a count; tag and matrix_detail are None except for a counted token method;
    `detail` is SEGMENT_DETAIL for a segment method (else None); `known_detail` SEGMENT_KNOWN_DETAIL for a segment
    method with `exact_measured` (else None); `default_at` lists the granularities at
    which the module shows the method once computed (DEFAULT_SEGMENT_METHOD); `request_default_at` those at which
    its "measure" button runs it by default (REQUEST_SEGMENT_METHOD); `first_map_at` those at which it is the first map
    while `default_at`'s method measures (FIRST_MAP_METHOD; at a granularity no method lists, the gradient).
    """
    out = []
    for core in core_methods.registry_json(kinds=("token", "segment")):
        name = core["name"]
        extra = EXTRA_BY_METHOD.get(name)
        segment = core["kind"] == "segment"
        rule = core_methods.get_any_method(name).count
        out.append({**core,
                    "max_count": None if rule is None else int(rule.hi),
                    "tag": None if extra is None else extra.kind,
                    "matrix_detail": None if extra is None else extra.matrix_detail,
                    "detail": SEGMENT_DETAIL if segment else None,
                    "known_detail": SEGMENT_KNOWN_DETAIL if segment and core["exact_measured"] else None,
                    "default_at": [g for g, m in DEFAULT_SEGMENT_METHOD.items() if m == name],
                    "request_default_at": [g for g, m in REQUEST_SEGMENT_METHOD.items() if m == name],
                    "first_map_at": [g for g, m in FIRST_MAP_METHOD.items() if m == name]})
    return out
