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


def deletion_table(model, prompt_ids, target_ids, segment_tokens, segment_chars, segment_scores, signed,
                   filler_id, steps, n_random, seed, sigmas=2.0):
    """A plain deletion-faithfulness table (filler removal), written from the issue's definitions.

    segment_tokens: the prompt token indices of each removable segment; segment_chars: their
    character lengths; segment_scores: method -> per-segment salience; signed: method -> bool.
    Returns name -> {"aopc", "ordering", "verdict"} plus "random" {"aopc", "std"} and "length" {"aopc"}.
    Every point is one unpadded forward pass; AOPC = mean over the points of log p(x) - log p(x edited).
    """
    S = len(segment_tokens)
    k_max = max(1, min(steps, S))
    counts = [int(round(k * S / k_max)) for k in range(k_max + 1)]
    T = len(target_ids)
    original = span_logprob(model, prompt_ids, target_ids, 0, T)

    def curve_aopc(order):
        drops = []
        for n in counts:
            ids = list(prompt_ids)
            for s in order[:n]:
                for i in segment_tokens[s]:
                    ids[i] = filler_id
            drops.append(original - span_logprob(model, ids, target_ids, 0, T))
        return float(np.mean(drops))

    out = {}
    rng = np.random.default_rng(seed)
    rand = [curve_aopc(list(rng.permutation(S))) for _ in range(n_random)]
    # The mean curve's AOPC equals the mean of the orders' AOPCs (AOPC is linear in the curve).
    out["random"] = {"aopc": float(np.mean(rand)), "std": float(np.std(rand, ddof=1)) if n_random > 1 else 0.0}
    by_length = sorted(range(S), key=lambda s: (-len(segment_tokens[s]), -segment_chars[s], s))
    out["length"] = {"aopc": curve_aopc(by_length)}
    noise = sigmas * out["random"]["std"]
    best_baseline = max(out["random"]["aopc"], out["length"]["aopc"])

    def verdict(a):
        if a > out["random"]["aopc"] + noise and a > out["length"]["aopc"] + noise:
            return "beats random and length"
        return "worse" if a < best_baseline - noise else "within noise"

    for m, sc in segment_scores.items():
        sc = [float(x) for x in sc]
        variants = [(m, "signed" if signed[m] else "value", sorted(range(S), key=lambda s: (-sc[s], s)))]
        if signed[m]:
            variants.append((m + ":abs", "abs", sorted(range(S), key=lambda s: (-abs(sc[s]), s))))
        for name, ordering, order in variants:
            a = curve_aopc(order)
            out[name] = {"aopc": a, "ordering": ordering, "verdict": verdict(a)}
    return out
