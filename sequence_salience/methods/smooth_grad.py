"""SmoothGrad (Smilkov et al. 2017, https://arxiv.org/abs/1706.03825) of gradient x input.

    SG_t,i = ( mean_s  d log p(target_t) / d x_i  at  x + eps_s ) . x_i,
    eps_s,i ~ N(0, (noise * ||x_i|| / sqrt(D))^2 I)

so the noise on each token's embedding has about `noise` times that embedding's norm
(`SalienceConfig.smooth_grad_noise`, default 0.1; `smooth_grad_samples` samples, default 8,
seeded by `smooth_grad_seed`: the same seed gives the same result, whatever the chunking,
batching or padding side).
The one documented choice: the averaged gradient times the clean input, signed and linear
in the target (a span is the sum of its rows, as for gradient x input); with zero noise it
equals gradient x input exactly. Samples run as one batch like the IG steps, through the same
sampling loop and budget rule (methods/sampling.py), and all target tokens share each batched
backward.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from sequence_salience.field_rules import FieldRule
from sequence_salience.methods.base import (MethodContext, MethodOutput, ModelInputs, SalienceConfig, SalienceMethod,
                                            settings_of)
from sequence_salience.methods.sampling import sampled_span_gradient, sampled_target_gradients

# The count: noisy samples (one backward per target per sample).
SAMPLES = FieldRule("smooth_grad_samples", int, 8, 1, 256, "SmoothGrad: noisy samples (one backward per target per"
                    " sample)")


@dataclasses.dataclass(frozen=True)
class Settings:
    """SmoothGrad's settings (fields of SalienceConfig once registered).

    Attributes:
      smooth_grad_samples: noisy samples (the count, SAMPLES).
      smooth_grad_noise: noise scale relative to each token embedding's norm.
      smooth_grad_seed: seed of the noise (the same seed gives the same result).
    """

    smooth_grad_samples: int = SAMPLES.default
    smooth_grad_noise: float = 0.1
    smooth_grad_seed: int = 0


def _settings(config: SalienceConfig) -> tuple[int, float, int]:
    own = settings_of(Settings, config)
    return int(own.smooth_grad_samples), float(own.smooth_grad_noise), int(own.smooth_grad_seed)


def noised_embeddings(embeds: torch.Tensor, mask: torch.Tensor, samples: int, noise: float, seed: int) -> torch.Tensor:
    """Noisy copies of each example: <float>[B, L, D] -> <float>[B * S, L, D] (sample-major within
    each example, like IG steps).

    Each example's noise is drawn for its real tokens only (mask <int>[B, L]), from its own
    generator seeded with `seed`, so an example gets the same noise alone or in a batch, with
    left or right padding. Padding positions get none.
    """
    batch, seq_len, dim = embeds.shape
    x = embeds.detach().double().cpu()  # [B, L, D]
    noisy = x[:, None].repeat(1, samples, 1, 1)  # [B, S, L, D]
    for b in range(batch):
        real = torch.nonzero(mask[b].cpu(), as_tuple=True)[0]  # [n]
        gen = torch.Generator(device="cpu").manual_seed(seed)
        eps = torch.randn(samples, len(real), dim, generator=gen, dtype=torch.float64)  # [S, n, D]
        scale = x[b, real].norm(dim=-1, keepdim=True) / np.sqrt(dim) * noise  # [n, 1]
        noisy[b][:, real] += eps * scale[None]
    return noisy.to(embeds.dtype).to(embeds.device).reshape(batch * samples, seq_len, dim)


def _noisy(inputs: ModelInputs, samples: int, noise: float, seed: int):
    """The sampling loop's points: samples sl of every example's noisy copies, <float>[B * n, L, D]."""
    batch, seq_len, dim = inputs.embeds.shape
    noisy = noised_embeddings(inputs.embeds, inputs.attention_mask, samples, noise, seed).view(
        batch, samples, seq_len, dim)  # [B, S, L, D]
    return lambda sl: noisy[:, sl].reshape(batch * (sl.stop - sl.start), seq_len, dim)


def compute(inputs: ModelInputs, config: SalienceConfig, context: MethodContext) -> MethodOutput:
    samples, noise, seed = _settings(config)
    progress, sizer = context.progress, context.sizer
    units = [0, 0]  # (target x sample) units done, target units reported

    def on_units(done: int) -> None:  # progress counts target tokens: report whole ones
        units[0] += done
        whole = units[0] // samples
        if whole > units[1] or sizer is not None:  # time slices: the callback runs after every slice
            progress(whole - units[1])
            units[1] = whole

    total = sampled_target_gradients(inputs, config, samples, _noisy(inputs, samples, noise, seed),
                                     on_units=on_units if progress is not None else None,
                                     sizer=sizer)  # [T, B, L, D]
    mean = total / samples
    matrix = (mean * inputs.embeds.float()[None]).sum(-1).permute(1, 0, 2)  # [B, T, L]
    return MethodOutput(matrix=matrix.cpu().numpy())


def compute_span(inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig,
                 progress=None) -> np.ndarray:
    samples, noise, seed = _settings(config)
    total = sampled_span_gradient(inputs, target_weights, config, samples, _noisy(inputs, samples, noise, seed),
                                  progress=progress)  # [B, L, D]
    return ((total / samples) * inputs.embeds.float()).sum(-1).cpu().numpy()  # [B, L]


NAME = "smooth_grad"

# Progress counts whole target tokens (compute() reports them as its samples finish).
METHOD = SalienceMethod(name=NAME, label="SmoothGrad (× input)", short="SmoothGrad",
                        menu="SmoothGrad × input", signed=True, linear=True,
                        compute=compute, compute_span=compute_span, paper="https://arxiv.org/abs/1706.03825",
                        cost_unit="one backward per target per sample",
                        trust="Less noisy than one gradient but still a local estimate: trust the ranking once more "
                              "samples no longer change it, not the exact values.", count=SAMPLES, count_unit="samples",
                        settings=Settings, job_tag="sg")
