"""The explicit registry of salience methods, keyed by snake_case name."""

from __future__ import annotations

from sequence_salience.errors import SalienceError
from sequence_salience.methods import grad_norm, grad_x_input, integrated_gradients, smooth_grad
from sequence_salience.methods.base import SalienceConfig, SalienceMethod

_REGISTRY: dict[str, SalienceMethod] = {
    m.name: m for m in (grad_norm.METHOD, grad_x_input.METHOD, integrated_gradients.METHOD, smooth_grad.METHOD)
}


def list_methods() -> list[str]:
    """Names of all salience methods, in display order. The server, UI and docs read this."""
    return list(_REGISTRY)


def get_method(name: str) -> SalienceMethod:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SalienceError(f"Unknown salience method {name!r}. Fix: use one of {', '.join(_REGISTRY)}.") from None


__all__ = ["SalienceConfig", "SalienceMethod", "get_method", "list_methods"]
