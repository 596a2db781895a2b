"""Work shared by the gradient-at-the-input methods (gradient norm, gradient x input): one backward
per compute call for all of them, and the span computation they have in common."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from sequence_salience.methods.base import ModelInputs, SalienceConfig
from sequence_salience.methods.gradients import per_target_gradients, resolve_backward, weighted_gradient


def target_gradients(inputs: ModelInputs, config: SalienceConfig, cache: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs <float32>[B, T], grads <float32>[T, B, L, D]) at the input, computed once per call."""
    if "target_gradients" not in cache:
        cache["target_gradients"] = per_target_gradients(
            inputs, inputs.embeds, config.targets_per_chunk(inputs.embeds.shape[1], inputs.embeds.shape[0]),
            backward=resolve_backward(config.backward, inputs.model),
            on_chunk=cache.get("progress"),
            sizer=cache.get("sizer"),
        )
    return cache["target_gradients"]


def span_from_gradient(from_gradient: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[..., np.ndarray]:
    """The compute_span of a gradient-at-the-input method: `from_gradient` of one weighted backward."""

    def compute_span(inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig,
                     progress=None) -> np.ndarray:
        _, g = weighted_gradient(inputs, inputs.embeds, target_weights)  # [B, L, D]
        return from_gradient(g, inputs.embeds).cpu().numpy()  # [B, L]

    return compute_span
