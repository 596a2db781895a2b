"""Gradient L2 norm: ||d log p(target_t) / d x_i||_2 (Simonyan et al. 2013, https://arxiv.org/abs/1312.6034).

Unsigned. Not linear in the target: a span's salience is the norm of the summed
gradient vectors. The Gram tensor <g_t,i, g_s,i> kept in `extras["gram"]` makes
that exact for any span without the vectors: ||sum_{t in S} g_t,i||^2 = 1_S^T G_i 1_S.
"""

from __future__ import annotations

import torch

from sequence_salience.methods import shared
from sequence_salience.methods.base import MethodOutput, ModelInputs, SalienceConfig, SalienceMethod


def compute(inputs: ModelInputs, config: SalienceConfig, cache: dict) -> MethodOutput:
    _, grads = shared.target_gradients(inputs, config, cache)  # [T, B, L, D]
    matrix = grads.norm(dim=-1).permute(1, 0, 2)  # [B, T, L]
    num_t, batch, seq_len, _ = grads.shape
    extras = {}
    if batch * seq_len * num_t * num_t <= config.gram_max_elements:
        extras["gram"] = torch.einsum("tbld,sbld->blts", grads, grads).cpu().numpy()  # [B, L, T, T]
    return MethodOutput(matrix=matrix.cpu().numpy(), extras=extras)


def from_gradient(g: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
    """<float>[B, L, D] gradient of the objective -> <float32>[B, L]."""
    return g.float().norm(dim=-1)


compute_span = shared.span_from_gradient(from_gradient)  # (inputs, weights, config, progress=None) -> [B, L]


NAME = "grad_norm"

METHOD = SalienceMethod(
    name=NAME,
    label="Gradient norm",
    short="Grad norm",
    cost_unit="one backward per target (shared with the other gradient-at-the-input methods)",
    signed=False,
    linear=False,
    compute=compute,
    compute_span=compute_span,
    paper="https://arxiv.org/abs/1312.6034",
    from_gradient=from_gradient,
)
