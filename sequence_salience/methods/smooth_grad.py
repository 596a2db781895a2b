"""SmoothGrad (Smilkov et al. 2017, https://arxiv.org/abs/1706.03825) of gradient x input.

    SG_t,i = ( mean_s  d log p(target_t) / d x_i  at  x + eps_s ) . x_i,
    eps_s,i ~ N(0, (noise * ||x_i|| / sqrt(D))^2 I)

so the noise on each token's embedding has about `noise` times that embedding's norm
(`SalienceConfig.smooth_grad_noise`, default 0.1; `smooth_grad_samples` samples, default 8,
seeded by `smooth_grad_seed`: the same seed gives the same result, whatever the chunking,
batching or padding side).
The one documented choice: the averaged gradient times the clean input, signed and linear
in the target (a span is the sum of its rows, as for grad_x_input); with zero noise it
equals grad_x_input exactly. Samples run as one batch like the IG steps (in chunks of
`ig_step_chunk_size`), and all target tokens share each batched backward.
"""

from __future__ import annotations

import numpy as np
import torch

from sequence_salience.methods.base import MethodOutput, ModelInputs, SalienceConfig, SalienceMethod
from sequence_salience.methods.gradients import per_target_gradients, resolve_backward, weighted_gradient
from sequence_salience.slices import SliceSizer, batches

DEFAULT_SAMPLES = 8
DEFAULT_NOISE = 0.1
DEFAULT_SEED = 0


def _settings(config: SalienceConfig) -> tuple[int, float, int]:
    return (int(getattr(config, "smooth_grad_samples", DEFAULT_SAMPLES)),
            float(getattr(config, "smooth_grad_noise", DEFAULT_NOISE)),
            int(getattr(config, "smooth_grad_seed", DEFAULT_SEED)))


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


def _chunks(samples: int, config: SalienceConfig, rows: int, seq_len: int, sizer: SliceSizer | None = None):
    budget = getattr(config, "chunk_token_budget", None)
    size = config.ig_step_chunk_size if budget is None else max(
        1, min(config.ig_step_chunk_size, budget // max(1, rows * seq_len)))
    return batches(samples, size, sizer)


def compute(inputs: ModelInputs, config: SalienceConfig, cache: dict) -> MethodOutput:
    samples, noise, seed = _settings(config)
    batch, seq_len, dim = inputs.embeds.shape
    num_t = inputs.target_ids.shape[1]
    noisy = noised_embeddings(inputs.embeds, inputs.attention_mask, samples, noise, seed).view(
        batch, samples, seq_len, dim)
    total = torch.zeros(num_t, batch, seq_len, dim, device=inputs.embeds.device)  # [T, B, L, D]
    progress = cache.get("progress")
    sizer = cache.get("sizer")
    units = [0, 0]  # (target x sample) units done, target units reported

    def on_chunk(c: int, n: int) -> None:  # progress counts target tokens: report whole ones
        units[0] += c * n
        whole = units[0] // samples
        if whole > units[1] or sizer is not None:  # time slices: the callback runs after every slice
            progress(whole - units[1])
            units[1] = whole

    for sl in _chunks(samples, config, batch, seq_len, sizer):
        n = sl.stop - sl.start
        chunk = max(1, (config.target_chunk_size * 2) // (batch * n))
        _, g = per_target_gradients(
            inputs.repeat(n), noisy[:, sl].reshape(batch * n, seq_len, dim), chunk,
            reduce=lambda g: g.view(g.shape[0], batch, n, seq_len, dim).sum(2),
            backward=resolve_backward(config.backward, inputs.embeds.device),
            on_chunk=(lambda c, n=n: on_chunk(c, n)) if progress is not None else None,
            sizer=sizer,
        )  # [T, B, L, D]
        total += g
    mean = total / samples
    matrix = (mean * inputs.embeds.float()[None]).sum(-1).permute(1, 0, 2)  # [B, T, L]
    return MethodOutput(matrix=matrix.cpu().numpy())


def compute_span(inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig,
                 progress=None) -> np.ndarray:
    samples, noise, seed = _settings(config)
    batch, seq_len, dim = inputs.embeds.shape
    noisy = noised_embeddings(inputs.embeds, inputs.attention_mask, samples, noise, seed).view(
        batch, samples, seq_len, dim)
    total = torch.zeros(batch, seq_len, dim, device=inputs.embeds.device)  # [B, L, D]
    for sl in _chunks(samples, config, batch, seq_len):
        n = sl.stop - sl.start
        _, g = weighted_gradient(inputs.repeat(n), noisy[:, sl].reshape(batch * n, seq_len, dim),
                                 target_weights.repeat_interleave(n, 0))  # [B * n, L, D]
        total += g.view(batch, n, seq_len, dim).sum(1)
        if progress is not None:
            progress(n)
    return ((total / samples) * inputs.embeds.float()).sum(-1).cpu().numpy()  # [B, L]


NAME = "smooth_grad"

METHOD = SalienceMethod(
    name=NAME,
    label="SmoothGrad (× input)",
    short="SmoothGrad",
    cost_unit="one backward per target per sample",
    count_field="smooth_grad_samples",
    count_unit="samples",
    default_count=SalienceConfig.smooth_grad_samples,
    signed=True,
    linear=True,
    compute=compute,
    compute_span=compute_span,
    paper="https://arxiv.org/abs/1706.03825",
)
