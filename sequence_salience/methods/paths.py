"""Shared maths for path-integral methods: quadrature points/weights and baselines.

Reused by every method that integrates gradients along a straight path from a
baseline x' to the input x (integrated gradients; https://arxiv.org/abs/1703.01365).
"""

from __future__ import annotations

import numpy as np
import torch

from sequence_salience.errors import SalienceError

QUADRATURE_RULES = ("gausslegendre", "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid")
BASELINES = ("zero", "pad", "mean")


def quadrature(n_steps: int, rule: str = "gausslegendre") -> tuple[np.ndarray, np.ndarray]:
    """Points alpha in [0, 1] and weights (summing to 1) approximating integral_0^1 f(alpha) d alpha.

    Returns:
      alphas: <float64>[n_steps]
      weights: <float64>[n_steps]
    """
    if n_steps < 1:
        raise SalienceError(f"ig_steps={n_steps}; it must be at least 1 (16 is a good start).")
    n = n_steps
    if rule == "gausslegendre":
        nodes, w = np.polynomial.legendre.leggauss(n)
        return (nodes + 1.0) / 2.0, w / 2.0
    if rule == "riemann_left":
        return np.arange(n) / n, np.full(n, 1.0 / n)
    if rule == "riemann_right":
        return np.arange(1, n + 1) / n, np.full(n, 1.0 / n)
    if rule == "riemann_middle":
        return (np.arange(n) + 0.5) / n, np.full(n, 1.0 / n)
    if rule == "riemann_trapezoid":
        if n < 2:
            raise SalienceError("riemann_trapezoid needs ig_steps >= 2.")
        w = np.full(n, 1.0 / (n - 1))
        w[0] = w[-1] = 0.5 / (n - 1)
        return np.linspace(0.0, 1.0, n), w
    raise SalienceError(f"Unknown quadrature rule {rule!r}. Fix: use one of {', '.join(QUADRATURE_RULES)}.")


def baseline_embeddings(
    name: str, embeds: torch.Tensor, embedding_matrix: torch.Tensor, pad_id: int | None
) -> torch.Tensor:
    """The IG baseline x' for input embeddings `embeds` <float>[B, L, D].

    zero: the all-zeros embedding (default); pad: every token replaced by the pad
    (or EOS) token's embedding; mean: the mean of the vocabulary's embeddings.
    """
    if name == "zero":
        return torch.zeros_like(embeds)
    if name == "pad":
        if pad_id is None:
            raise SalienceError("ig_baseline='pad' needs a pad or EOS token. Fix: use ig_baseline='zero'.")
        return embedding_matrix[pad_id].to(embeds.dtype).expand_as(embeds).clone()
    if name == "mean":
        return embedding_matrix.float().mean(0).to(embeds.dtype).expand_as(embeds).clone()
    raise SalienceError(f"Unknown IG baseline {name!r}. Fix: use one of {', '.join(BASELINES)}.")


def interpolate(baseline: torch.Tensor, embeds: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    """Points on the straight path, step-major within each example.

    baseline, embeds: <float>[B, L, D]; alphas: <float>[S]
    Returns: <float>[B * S, L, D], row b * S + s = x'_b + alpha_s (x_b - x'_b).
    """
    diff = (embeds - baseline)[:, None]  # [B, 1, L, D]
    path = baseline[:, None] + alphas.to(embeds.dtype)[None, :, None, None] * diff  # [B, S, L, D]
    return path.reshape(-1, *embeds.shape[1:])
