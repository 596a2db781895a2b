"""Gradient x input: (d log p(target_t) / d x_i) . x_i (Shrikumar et al. 2016, https://arxiv.org/abs/1605.01713).

Signed and linear in the target: a span's salience is the sum of its tokens' rows.
"""

from __future__ import annotations

import torch

from sequence_salience.methods import shared


def from_gradient(g: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
    """<float>[..., L, D] gradient of the objective, <float>[..., L, D] input -> <float32>[..., L]."""
    return (g.float() * embeds.float()).sum(-1)


NAME = "grad_x_input"

METHOD = shared.input_gradient_method(NAME, "Gradient × input", "G×I", signed=True, linear=True,
                                      paper="https://arxiv.org/abs/1605.01713",
                                      trust="A local, linear estimate: trust its sign and ranking where small edits act "
                                            "linearly, and confirm large values with leave one segment out.", from_gradient=from_gradient)
