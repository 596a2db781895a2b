"""Plain, independent references for the explanation tests: one unpadded forward per sequence."""

from __future__ import annotations

import numpy as np
import torch


def logprobs(model, ids, n_prompt: int) -> np.ndarray:
    """log p(ids[P + t] | ids[:P + t]) for every target token: <float64>[T], one forward, no padding."""
    x = torch.tensor([list(ids)])
    with torch.no_grad():
        logits = model(input_ids=x).logits[0].double()  # [N, V]
    lp = torch.log_softmax(logits, -1)
    n = len(ids)
    return np.array([lp[p - 1, ids[p]].item() for p in range(n_prompt, n)])


def span_logprob(model, prompt_ids, target_ids, t0: int, t1: int) -> float:
    return float(logprobs(model, list(prompt_ids) + list(target_ids), len(prompt_ids))[t0:t1].sum())


def greedy_keeps(model, prompt_ids, target_ids) -> bool:
    """Every target token is the argmax after its prefix (teacher forcing)."""
    ids = list(prompt_ids) + list(target_ids)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    P = len(prompt_ids)
    return all(int(logits[p - 1].argmax()) == ids[p] for p in range(P, len(ids)))


def span_gradient(model, prompt_ids, target_ids) -> torch.Tensor:
    """d sum_t log p(target_t) / d embeddings of the prompt tokens: <float64>[P, D]."""
    ids = list(prompt_ids) + list(target_ids)
    emb = model.get_input_embeddings().weight[torch.tensor(ids)].detach().clone().requires_grad_(True)
    logits = model(inputs_embeds=emb[None]).logits[0]
    lp = torch.log_softmax(logits, -1)
    P = len(prompt_ids)
    total = sum(lp[p - 1, ids[p]] for p in range(P, len(ids)))
    (g,) = torch.autograd.grad(total, emb)
    return g[:P].detach()


def greedy_continuation(model, prompt_ids, n: int) -> list[int]:
    """n tokens of plain greedy decoding (argmax, one unpadded forward per token, no cache)."""
    ids = list(prompt_ids)
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out
