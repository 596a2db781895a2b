"""Work shared by the gradient-at-the-input methods (gradient norm, gradient x input): one backward
per salience call for all of them, and the record (compute, compute_span, cost) they have in common."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from sequence_salience.methods.base import (MethodContext, MethodOutput, ModelInputs, ResultExtra, SalienceConfig,
                                            SalienceMethod)
from sequence_salience.methods.gradients import per_target_gradients, resolve_backward, weighted_gradient

# (g <float>[..., L, D] gradient, embeds <float>[..., L, D]) -> <float32>[..., L]; leading dimensions broadcast.
FromGradient = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# (grads <float32>[T, B, L, D], config) -> named arrays of MethodOutput.extras.
GradientExtras = Callable[[torch.Tensor, SalienceConfig], Mapping[str, np.ndarray]]

COST_UNIT = "one backward per target (shared with the other gradient-at-the-input methods)"


def target_gradients(inputs: ModelInputs, config: SalienceConfig,
                     context: MethodContext) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs <float32>[B, T], grads <float32>[T, B, L, D]) at the input, computed once per call
    (kept in `context.shared`)."""
    if context.shared.target_gradients is None:
        context.shared.target_gradients = per_target_gradients(
            inputs, inputs.embeds, config.targets_per_chunk(inputs.embeds.shape[1], inputs.embeds.shape[0]),
            backward=resolve_backward(config.backward, inputs.model),
            on_chunk=context.progress,
            sizer=context.sizer,
        )
    return context.shared.target_gradients


def span_from_gradient(from_gradient: FromGradient) -> Callable[..., np.ndarray]:
    """The compute_span of a gradient-at-the-input method: `from_gradient` of one weighted backward."""

    def compute_span(inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig,
                     progress=None) -> np.ndarray:
        _, g = weighted_gradient(inputs, inputs.embeds, target_weights)  # [B, L, D]
        return from_gradient(g, inputs.embeds).cpu().numpy()  # [B, L]

    return compute_span


def input_gradient_method(name: str, label: str, short: str, *, signed: bool, linear: bool, paper: str, trust: str,
                          from_gradient: FromGradient, extras: GradientExtras | None = None,
                          result_extras: tuple[ResultExtra, ...] = (),
                          span_gram: str | None = None, settings: type | None = None) -> SalienceMethod:
    """The registry record of a method that is a function of the gradient at the input (and the input).

    Its matrix applies `from_gradient` to every target token's gradient (the call's one shared backward);
    `extras` (optional) adds named arrays from those gradients (grad_norm's Gram tensor), which
    `result_extras`, `span_gram` and `settings` declare as in SalienceMethod.
    """

    def compute(inputs: ModelInputs, config: SalienceConfig, context: MethodContext) -> MethodOutput:
        _, grads = target_gradients(inputs, config, context)  # [T, B, L, D]
        matrix = from_gradient(grads, inputs.embeds[None]).permute(1, 0, 2)  # [B, T, L]
        return MethodOutput(matrix=matrix.cpu().numpy(), extras=dict(extras(grads, config)) if extras else {})

    return SalienceMethod(name=name, label=label, short=short, signed=signed, linear=linear, paper=paper,
                          compute=compute, compute_span=span_from_gradient(from_gradient), cost_unit=COST_UNIT,
                          trust=trust, from_gradient=from_gradient, result_extras=result_extras, span_gram=span_gram,
                          settings=settings)
