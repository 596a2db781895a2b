"""The salience methods as the LIT layer serves them: the core registry plus the LIT facts per method.

The core registry (`sequence_salience.methods`, `registry_json()`) is the single source of
every method's name, label, short name, signedness, linearity, count field and unit, default
count and cost unit. The LIT layer adds, for each method with a count (computed only when a
request sets its count field > 0):

* `tag`: the background job's kind prefix; the job of count n is f"{tag}{n}" ("ig16", "sg8").
* `matrix_detail`: the `detail` value that starts the method's per-token matrix job.
* `max_count`: the largest count a request may ask for (the HTTP edge may allow fewer, see
  lit_app/limits.py).

`EXTRA_METHODS` holds those methods as records for the wrappers (input parsing, payloads, the
shared model, the salience wrapper, the HTTP limits), in the registry's display order.
`published_registry()` is the merged list the server publishes to the browser in the salience
model's output spec (`fields.METHOD_REGISTRY`; shape in docs/architecture.md, "Method
registry"), so that no TypeScript module spells a method name or label of its own.

No method name is spelled here: the LIT facts are keyed by the method modules' `NAME`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sequence_salience import methods as core_methods
from sequence_salience.methods import integrated_gradients, smooth_grad

MAX_IG_STEPS = 256
MAX_SMOOTH_GRAD_SAMPLES = 256


@dataclasses.dataclass(frozen=True)
class LitFacts:
    """What the LIT layer adds to a counted method (see the module docstring)."""

    tag: str
    matrix_detail: str
    max_count: int


# The wire values stay as they were before the registry: the browser, scripts and saved URLs send them.
LIT_FACTS: dict[str, LitFacts] = {
    integrated_gradients.NAME: LitFacts("ig", "ig_matrix", MAX_IG_STEPS),
    smooth_grad.NAME: LitFacts("sg", f"{smooth_grad.NAME}_matrix", MAX_SMOOTH_GRAD_SAMPLES),
}


@dataclasses.dataclass(frozen=True)
class ExtraMethod:
    """A method computed only when a request asks for it, with a count (0 = off).

    Attributes:
      method: the core library's name.
      field: the input field carrying the count; also the `SalienceConfig` attribute it sets.
      kind: the background job's kind prefix (`tag`); the job of count n is f"{kind}{n}".
      matrix_detail: the `detail` value that starts its per-token matrix job.
      unit: what the count counts; the payload key of its method entry.
      maximum: the largest count a request may ask for (`max_count`).
    """

    method: str
    field: str
    kind: str
    matrix_detail: str
    unit: str
    maximum: int

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
            f"lit_app.method_registry: counted methods without LIT facts {missing}, LIT facts for methods"
            f" without a count {stray}. Fix: give every core method with a count_field one LIT_FACTS entry.")
    return tuple(ExtraMethod(m.name, m.count_field, facts[m.name].tag, facts[m.name].matrix_detail, m.count_unit,
                             facts[m.name].max_count) for m in counted)


EXTRA_METHODS: tuple[ExtraMethod, ...] = extra_methods(LIT_FACTS)
EXTRA_BY_METHOD: dict[str, ExtraMethod] = {e.method: e for e in EXTRA_METHODS}
# The input fields carrying the extra methods' counts, in display order.
COUNT_FIELDS: tuple[str, ...] = tuple(e.field for e in EXTRA_METHODS)


def published_registry() -> list[dict[str, Any]]:
    """Every method's core facts (`registry_json()`, all its keys) plus its LIT facts, in display order:

    {name, label, short, signed, linear, count_field, count_unit, default_count, cost_unit, max_count,
    tag, matrix_detail} (JSON-able); count_field, count_unit, max_count, tag and matrix_detail are
    None (null) for a method without a count.
    """
    out = []
    for core in core_methods.registry_json():
        extra = EXTRA_BY_METHOD.get(core["name"])
        out.append({**core,
                    "max_count": None if extra is None else extra.maximum,
                    "tag": None if extra is None else extra.kind,
                    "matrix_detail": None if extra is None else extra.matrix_detail})
    return out
