"""The explicit registry of salience methods, keyed by snake_case name: the single source of their facts.

Two kinds of method:

* token methods (`SalienceMethod`, kind "token"): a value for every token and every target token,
  from gradients (grad_norm, grad_x_input, integrated_gradients, smooth_grad); aggregation to words,
  sentences, ... needs no model pass.
* segment methods (`SegmentMethod`, kind "segment"): a value per segment of one segmentation, from
  forward passes over ablated prompts (leave_one_out, ablation_surrogate, coarse_to_fine;
  sequence_salience/ablation computes them); attention_attribution estimates leave-one-out from one
  forward's attention with a per-model estimator (sequence_salience/attention), and attention_verified
  measures exact leave-one-out of the segments the estimate and the gradient rank highest, until its top three
  is stable, on top of it; word_verified, at word level, of the quarter of the words the estimate ranks
  highest. A change of granularity recomputes them.

Each method module declares its `NAME` and one record (name, label, short name, signedness,
linearity, count rule and unit, cost unit, kind) with its own settings (a frozen dataclass, the record's
`settings`, which joins SalienceConfig or AblationConfig at `register`); the engine, contrastive salience,
the CLI, the LIT layer and (through the server, `registry_json`) the browser read them from here. Adding a
method is one module plus its line in the tuple below (docs/architecture.md, "How to add a method").
"""

from __future__ import annotations

import dataclasses

from sequence_salience import field_rules
from sequence_salience.errors import SalienceError
from sequence_salience.methods import (ablation_surrogate, coarse_to_fine, grad_norm, grad_x_input,
                                       integrated_gradients, leave_one_out, smooth_grad)
from sequence_salience.methods import attention_attribution, attention_verified, word_verified
from sequence_salience.methods.base import (COUNT_UNITS, AblationConfig, SalienceConfig, SalienceMethod, SegmentMethod,
                                            add_settings)

_REGISTRY: dict[str, SalienceMethod] = {}
_SEGMENT_REGISTRY: dict[str, SegmentMethod] = {}


def register(method: SalienceMethod | SegmentMethod) -> None:
    """Adds a method record to the registry, after those registered before (display order).

    Its `settings` join SalienceConfig (a token method) or AblationConfig (a segment method); everything
    else reads the record from here: the CLI flags (cli/parser.py), the LIT input specs, limits, payloads
    and published registry (lit_app/) and, through that, the browser; its count's rule joins
    field_rules.RULES. Register before the LIT app's modules
    are imported (they derive their specs once). Raises SalienceError when the name is taken, or when the
    count's rule is not a field of the settings with the rule's default.
    """
    if method.name in _REGISTRY or method.name in _SEGMENT_REGISTRY:
        raise SalienceError(f"A method named {method.name!r} is already registered. Fix: give the new one its own name.")
    if method.count is not None:
        owned = {f.name: f.default for f in dataclasses.fields(method.settings)} if method.settings else {}
        if owned.get(method.count.name, dataclasses.MISSING) != method.count.default:
            raise SalienceError(
                f"{method.name}'s count {method.count.name!r} is not a field of its settings with the rule's default "
                f"({method.count.default}). Fix: declare `{method.count.name}: int = <RULE>.default` in its Settings.")
        if method.kind == "token" and method.count_unit not in COUNT_UNITS:
            raise SalienceError(
                f"{method.name} counts {method.count_unit!r}; a counted token method counts one of {COUNT_UNITS} (the "
                "browser reads the count from the payload entry under that unit). Fix: use one of them.")
    segment = isinstance(method, SegmentMethod)
    if method.settings is not None:
        add_settings(AblationConfig if segment else SalienceConfig, method.settings, method.name)
    if method.count is not None:
        field_rules.add_method_rule(method.count)  # field_rules.RULES, field_rules.IG_STEPS
    (_SEGMENT_REGISTRY if segment else _REGISTRY)[method.name] = method


for _method in (grad_norm.METHOD, grad_x_input.METHOD, integrated_gradients.METHOD, smooth_grad.METHOD,
                leave_one_out.METHOD, ablation_surrogate.METHOD, coarse_to_fine.METHOD, attention_attribution.METHOD,
                attention_verified.METHOD, word_verified.METHOD):
    register(_method)

# The methods computed when a caller names none: the two that share one backward.
DEFAULT_METHODS: tuple[str, ...] = (grad_norm.NAME, grad_x_input.NAME)


def all_records() -> list[SalienceMethod | SegmentMethod]:
    """Every method's record, in display order (token methods first)."""
    return [*_REGISTRY.values(), *_SEGMENT_REGISTRY.values()]


def counted(kinds: tuple[str, ...] = ("token", "segment")) -> list[SalienceMethod | SegmentMethod]:
    """The records of `kinds` that have a count (a FieldRule), in display order."""
    return [m for m in all_records() if m.count is not None and m.kind in kinds]


def flagged_settings(kinds: tuple[str, ...] = ("token", "segment")) -> list[tuple[SalienceMethod | SegmentMethod,
                                                                                  dataclasses.Field]]:
    """(record, settings field) of every settings field of the records of `kinds` whose metadata names a "flag"
    (SalienceMethod.settings), in display order: the CLI's flags (cli/common.py method_flags) and, for segment
    methods, the server's (lit_app/schema/method_registry.py SERVER_SETTINGS)."""
    return [(m, f) for m in all_records() if m.kind in kinds and m.settings
            for f in dataclasses.fields(m.settings) if "flag" in f.metadata]


def list_methods() -> list[str]:
    """Names of the token (gradient) methods, in display order. The server, UI and docs read this."""
    return list(_REGISTRY)


def list_segment_methods() -> list[str]:
    """Names of the segment (ablation) methods, in display order."""
    return list(_SEGMENT_REGISTRY)


def is_segment_method(name: str) -> bool:
    return name in _SEGMENT_REGISTRY


def get_method(name: str) -> SalienceMethod:
    """The token method `name`; a segment method's name gets an error saying where it is computed."""
    try:
        return _REGISTRY[name]
    except KeyError:
        if name in _SEGMENT_REGISTRY:
            raise SalienceError(
                f"{name!r} is a segment method: its values live on segments, not tokens. Fix: compute it with "
                "sequence_salience.ablation.segment_salience(lm, prompt, target, method, granularity=...).") from None
        raise SalienceError(f"Unknown salience method {name!r}. Fix: use one of {', '.join(_all_names())}.") from None


def get_segment_method(name: str) -> SegmentMethod:
    try:
        return _SEGMENT_REGISTRY[name]
    except KeyError:
        raise SalienceError(f"Unknown segment method {name!r}. Fix: use one of {', '.join(_SEGMENT_REGISTRY)}"
                            f" (token methods: {', '.join(_REGISTRY)}).") from None


def get_any_method(name: str) -> SalienceMethod | SegmentMethod:
    """The record of a token or segment method (its label, signedness, ...)."""
    if name in _SEGMENT_REGISTRY:
        return _SEGMENT_REGISTRY[name]
    return get_method(name)


def _all_names() -> list[str]:
    return [*_REGISTRY, *_SEGMENT_REGISTRY]


def registry_json(kinds: tuple[str, ...] = ("token",)) -> list[dict]:
    """The facts of every method of `kinds` ("token", "segment") as JSON-able dicts, in display order (token methods first; see
    SalienceMethod.to_json): {name, label, short, signed, linear, count_field, count_unit,
    default_count, cost_unit, trust, kind, granularities, first_look, budget, exact_measured}."""
    return [m.to_json() for m in all_records() if m.kind in kinds]


__all__ = ["DEFAULT_METHODS", "AblationConfig", "SalienceConfig", "SalienceMethod", "SegmentMethod", "all_records",
           "counted", "flagged_settings", "get_any_method", "get_method", "get_segment_method", "is_segment_method",
           "list_methods", "list_segment_methods", "register", "registry_json"]
