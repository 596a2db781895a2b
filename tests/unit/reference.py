"""An independent, deliberately plain reference: one forward + backward per target token.

Written without the library's batching, padding, logits_to_keep or quadrature
code, so that agreement with it means something.
"""

from __future__ import annotations

import numpy as np
import torch


def _grad_for_target(model, embeds_prefix: torch.Tensor, target_id: int) -> torch.Tensor:
    """d log p(target | prefix) / d embeds_prefix for one prefix <float>[L, D]."""
    e = embeds_prefix.detach().clone().requires_grad_(True)
    logits = model(inputs_embeds=e[None]).logits[0, -1]  # [V]
    logp = torch.log_softmax(logits, dim=-1)[target_id]
    (g,) = torch.autograd.grad(logp, e)
    return g  # [L, D]


def reference_salience(
    model, ids: list[int], n_prompt: int, ig_steps: int = 0, keep_gradients: bool = False
) -> dict[str, np.ndarray]:
    """Per-target loops for grad_norm, grad_x_input and (if ig_steps) IG with a midpoint Riemann sum.

    Returns {method: <float64>[T, N]}, plus "logp" <float64>[T] and "ig_delta" <float64>[T],
    and with keep_gradients "gradients" <float64>[T, N, D] (each target's gradient vectors).
    """
    emb = model.get_input_embeddings().weight
    x = emb[torch.tensor(ids)].detach()  # [N, D]
    n = len(ids)
    out = {k: np.zeros((n - n_prompt, n)) for k in ("grad_norm", "grad_x_input", "integrated_gradients")}
    logps, deltas = [], []
    if keep_gradients:
        out["gradients"] = np.zeros((n - n_prompt, n, x.shape[1]))
    for t in range(n - n_prompt):
        prefix_len = n_prompt + t
        target = ids[prefix_len]
        g = _grad_for_target(model, x[:prefix_len], target)
        if keep_gradients:
            out["gradients"][t, :prefix_len] = g.numpy()
        out["grad_norm"][t, :prefix_len] = g.norm(dim=-1).numpy()
        out["grad_x_input"][t, :prefix_len] = (g * x[:prefix_len]).sum(-1).numpy()
        with torch.no_grad():
            logps.append(torch.log_softmax(model(inputs_embeds=x[None, :prefix_len]).logits[0, -1], -1)[target].item())
        if ig_steps:
            total = torch.zeros_like(x[:prefix_len])
            for k in range(ig_steps):
                alpha = (k + 0.5) / ig_steps
                total += _grad_for_target(model, alpha * x[:prefix_len], target) / ig_steps
            ig = (total * x[:prefix_len]).sum(-1)
            out["integrated_gradients"][t, :prefix_len] = ig.numpy()
            with torch.no_grad():
                base = torch.log_softmax(model(inputs_embeds=torch.zeros_like(x[None, :prefix_len])).logits[0, -1], -1)[target]
            deltas.append(ig.sum().item() - (logps[-1] - base.item()))
    out["logp"] = np.array(logps)
    out["ig_delta"] = np.array(deltas)
    return out


def reference_smooth_grad(model, ids: list[int], n_prompt: int, noisy: torch.Tensor) -> np.ndarray:
    """SmoothGrad x input by a per-target, per-sample loop: <float64>[T, N].

    noisy: <float>[S, N, D] the S noisy copies of the input's embeddings (the library draws them;
    a test checks their size apart); the mean gradient over them times the clean input.
    """
    x = model.get_input_embeddings().weight[torch.tensor(ids)].detach()  # [N, D]
    n, samples = len(ids), noisy.shape[0]
    out = np.zeros((n - n_prompt, n))
    for t in range(n - n_prompt):
        prefix_len = n_prompt + t
        total = torch.zeros(prefix_len, x.shape[1], dtype=x.dtype)
        for s in range(samples):
            total += _grad_for_target(model, noisy[s, :prefix_len], ids[prefix_len]) / samples
        out[t, :prefix_len] = (total * x[:prefix_len]).sum(-1).numpy()
    return out
