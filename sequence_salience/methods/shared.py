"""Work shared between methods within one compute call (one backward for grad_norm and grad_x_input)."""

from __future__ import annotations

import torch

from sequence_salience.methods.base import ModelInputs, SalienceConfig
from sequence_salience.methods.gradients import per_target_gradients, resolve_backward


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
