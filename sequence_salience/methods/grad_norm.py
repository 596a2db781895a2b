"""Gradient L2 norm: ||d log p(target_t) / d x_i||_2 (Simonyan et al. 2013, https://arxiv.org/abs/1312.6034).

Unsigned. Not linear in the target: a span's salience is the norm of the summed
gradient vectors. The Gram tensor <g_t,i, g_s,i> kept in `extras["gram"]` makes
that exact for any span without the vectors: ||sum_{t in S} g_t,i||^2 = 1_S^T G_i 1_S.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from sequence_salience.methods import shared
from sequence_salience.methods.base import ResultExtra, SalienceConfig


def from_gradient(g: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
    """<float>[..., L, D] gradient of the objective -> <float32>[..., L]."""
    return g.float().norm(dim=-1)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Gradient norm's settings (fields of SalienceConfig once registered).

    Attributes:
      gram_max_elements: largest N*T*T Gram tensor kept for exact spans (`gram`).
    """

    gram_max_elements: int = 64_000_000


def gram(grads: torch.Tensor, config: SalienceConfig) -> dict[str, np.ndarray]:
    """{"gram": <float32>[B, L, T, T]} from grads <float32>[T, B, L, D]; {} past config.gram_max_elements."""
    num_t, batch, seq_len, _ = grads.shape
    if batch * seq_len * num_t * num_t > config.gram_max_elements:
        return {}
    return {"gram": torch.einsum("tbld,sbld->blts", grads, grads).cpu().numpy()}  # [B, L, T, T]


# The result extra it declares (SalienceResult.extras[GRAM]): <float32>[N, T, T].
GRAM = "grad_gram"


NAME = "grad_norm"

METHOD = shared.input_gradient_method(
    NAME, "Gradient norm", "Grad norm", signed=False, linear=False, paper="https://arxiv.org/abs/1312.6034",
    trust="A quick first look at what the target is sensitive to, not at what raises or lowers it; on held-out prompts "
          "it often ranks differently from exact leave-one-out, so confirm a finding before reading it as a cause.",
    from_gradient=from_gradient, extras=gram, span_gram=GRAM, settings=Settings,
    result_extras=(ResultExtra(GRAM, "gram", "LTT", "Gram tensor <g_t,i, g_s,i> of the per-target gradients at each"
                               " token (absent past SalienceConfig.gram_max_elements)", payload="gram_packed"),))
