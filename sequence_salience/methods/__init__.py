"""The explicit registry of salience methods, keyed by snake_case name: the single source of their facts.

Each method module declares its `NAME` and one `SalienceMethod` record (name, label, short name,
signedness, linearity, count field and unit, cost unit); the engine, contrastive salience, the CLI,
the LIT layer and (through the server, `registry_json`) the browser read them from here.
"""

from __future__ import annotations

from sequence_salience.errors import SalienceError
from sequence_salience.methods import grad_norm, grad_x_input, integrated_gradients, smooth_grad
from sequence_salience.methods.base import SalienceConfig, SalienceMethod

_REGISTRY: dict[str, SalienceMethod] = {
    m.name: m for m in (grad_norm.METHOD, grad_x_input.METHOD, integrated_gradients.METHOD, smooth_grad.METHOD)
}

# The methods computed when a caller names none: the two that share one backward.
DEFAULT_METHODS: tuple[str, ...] = (grad_norm.NAME, grad_x_input.NAME)


def list_methods() -> list[str]:
    """Names of all salience methods, in display order. The server, UI and docs read this."""
    return list(_REGISTRY)


def get_method(name: str) -> SalienceMethod:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SalienceError(f"Unknown salience method {name!r}. Fix: use one of {', '.join(_REGISTRY)}.") from None


def registry_json() -> list[dict]:
    """Every method's facts as JSON-able dicts, in display order (see SalienceMethod.to_json):
    {name, label, short, signed, linear, count_field, count_unit, default_count, cost_unit}."""
    return [m.to_json() for m in _REGISTRY.values()]


__all__ = ["DEFAULT_METHODS", "SalienceConfig", "SalienceMethod", "get_method", "list_methods", "registry_json"]
