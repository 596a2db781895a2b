"""The explicit registry of salience methods, keyed by snake_case name: the single source of their facts.

Two kinds of method:

* token methods (`SalienceMethod`, kind "token"): a value for every token and every target token,
  from gradients (grad_norm, grad_x_input, integrated_gradients, smooth_grad); aggregation to words,
  sentences, ... needs no model pass.
* segment methods (`SegmentMethod`, kind "segment"): a value per segment of one segmentation, from
  forward passes over ablated prompts (leave_one_out, ablation_surrogate, coarse_to_fine;
  sequence_salience/ablation computes them); attention_attribution estimates leave-one-out from one
  forward's attention with a per-model estimator (sequence_salience/attention), and attention_verified
  measures exact leave-one-out of the estimate's top three on top of it. A change of granularity
  recomputes them.

Each method module declares its `NAME` and one record (name, label, short name, signedness,
linearity, count field and unit, cost unit, kind); the engine, contrastive salience, the CLI, the
LIT layer and (through the server, `registry_json`) the browser read them from here.
"""

from __future__ import annotations

from sequence_salience.errors import SalienceError
from sequence_salience.methods import (ablation_surrogate, coarse_to_fine, grad_norm, grad_x_input,
                                       integrated_gradients, leave_one_out, smooth_grad)
from sequence_salience.methods import attention_attribution, attention_verified
from sequence_salience.methods.base import AblationConfig, SalienceConfig, SalienceMethod, SegmentMethod

_REGISTRY: dict[str, SalienceMethod] = {
    m.name: m for m in (grad_norm.METHOD, grad_x_input.METHOD, integrated_gradients.METHOD, smooth_grad.METHOD)
}
_SEGMENT_REGISTRY: dict[str, SegmentMethod] = {
    m.name: m for m in (leave_one_out.METHOD, ablation_surrogate.METHOD, coarse_to_fine.METHOD,
                        attention_attribution.METHOD, attention_verified.METHOD)
}

# The methods computed when a caller names none: the two that share one backward.
DEFAULT_METHODS: tuple[str, ...] = (grad_norm.NAME, grad_x_input.NAME)


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
    default_count, cost_unit, kind, granularities}."""
    records = [*_REGISTRY.values(), *_SEGMENT_REGISTRY.values()]
    return [m.to_json() for m in records if m.kind in kinds]


__all__ = ["DEFAULT_METHODS", "AblationConfig", "SalienceConfig", "SalienceMethod", "SegmentMethod", "get_any_method",
           "get_method", "get_segment_method", "is_segment_method", "list_methods", "list_segment_methods",
           "registry_json"]
