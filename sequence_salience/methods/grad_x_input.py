"""Gradient x input: (d log p(target_t) / d x_i) . x_i (Shrikumar et al. 2016, https://arxiv.org/abs/1605.01713).

Signed and linear in the target: a span's salience is the sum of its tokens' rows.
"""

from __future__ import annotations

import torch

from sequence_salience.methods import shared
from sequence_salience.methods.base import MethodOutput, ModelInputs, SalienceConfig, SalienceMethod


def compute(inputs: ModelInputs, config: SalienceConfig, cache: dict) -> MethodOutput:
    _, grads = shared.target_gradients(inputs, config, cache)  # [T, B, L, D]
    matrix = (grads * inputs.embeds.float()[None]).sum(-1).permute(1, 0, 2)  # [B, T, L]
    return MethodOutput(matrix=matrix.cpu().numpy())


def from_gradient(g: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
    """<float>[B, L, D] gradient of the objective -> <float32>[B, L]."""
    return (g.float() * embeds.float()).sum(-1)


compute_span = shared.span_from_gradient(from_gradient)  # (inputs, weights, config, progress=None) -> [B, L]


NAME = "grad_x_input"

METHOD = SalienceMethod(
    name=NAME,
    label="Gradient × input",
    short="G×I",
    cost_unit="one backward per target (shared with the other gradient-at-the-input methods)",
    signed=True,
    linear=True,
    compute=compute,
    compute_span=compute_span,
    paper="https://arxiv.org/abs/1605.01713",
    from_gradient=from_gradient,
)
