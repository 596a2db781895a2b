"""Can the whole-response span come from the generation's own forward pass? (issue 16, item 2)

    python benchmarks/bench_span_from_generation.py [--max_new_tokens 64] [--repeats 3]

Baseline (what the server does): greedy generation without a graph (`LanguageModel.generate`),
then the teacher-forced span (`compute_span_result`: one forward + backward over prompt +
response) for grad_norm and grad_x_input. A third variant runs the candidate's own decoding loop without a graph,
then the teacher-forced span (what the loop saves apart from the graph). Candidate: greedy decoding token by token with the
autograd graph kept through the KV cache (the prompt's and every fed response token's input
embeddings are leaves), then ONE backward of sum_t log p(response_t) at the end. Same process,
same weights, same prompt (the shipped "train ... arrive" chain-of-thought row), interleaved;
prints the times (best of the repeats), the ratio, and how far the candidate's values are from
the teacher-forced ones. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402

METHODS = ("grad_norm", "grad_x_input")


def baseline(lm, chat, config) -> tuple[object, dict[str, np.ndarray]]:
    gen = lm.generate(chat, config)
    result = ss.compute_span_result(lm, chat, gen, methods=METHODS)
    return gen, {m: result.span_salience(m, 0, len(gen.ids)) for m in METHODS}


def lean_greedy_then_span(lm, chat, config) -> tuple[tuple[int, ...], dict[str, np.ndarray]]:
    """The same hand-written decoding loop as the candidate, without a graph, then the teacher-forced span:
    separates what the loop itself saves (no `model.generate` machinery) from what keeping the graph saves."""
    model = lm.model
    prompt_ids = lm.encode_prompt(chat).ids
    stop = set(lm.stop_token_ids)
    ids: list[int] = []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_ids], device=lm.device), use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
        for _ in range(config.max_new_tokens):
            token = int(logits.argmax())
            if token in stop:
                break
            ids.append(token)
            if len(ids) == config.max_new_tokens:
                break
            out = model(input_ids=torch.tensor([[token]], device=lm.device), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1]
    text = lm.tokenizer.decode(ids, clean_up_tokenization_spaces=False)
    gen = ss.Generation(text=text, ids=tuple(ids), offsets=(), stopped_by="")
    result = ss.compute_span_result(lm, chat, gen, methods=METHODS)
    return tuple(ids), {m: result.span_salience(m, 0, len(ids)) for m in METHODS}


def generate_with_graph(lm, chat, config) -> tuple[tuple[int, ...], dict[str, np.ndarray]]:
    """Greedy decoding that keeps the graph through the KV cache; one backward at the end."""
    model, emb = lm.model, lm.model.get_input_embeddings()
    prompt_ids = lm.encode_prompt(chat).ids
    stop = set(lm.stop_token_ids)
    leaves = [emb.weight[torch.tensor(prompt_ids, device=lm.device)].detach().requires_grad_(True)]  # [P, D]
    with torch.enable_grad():
        out = model(inputs_embeds=leaves[0][None], use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]  # [V]
        ids: list[int] = []
        logps = []
        for _ in range(config.max_new_tokens):
            logp = torch.log_softmax(logits.float(), dim=-1)  # [V]
            token = int(logp.argmax())
            if token in stop:
                break
            ids.append(token)
            logps.append(logp[token])
            if len(ids) == config.max_new_tokens:
                break  # the last token's input predicts nothing we explain: not fed
            leaf = emb.weight[token].detach().requires_grad_(True)  # [D]
            leaves.append(leaf)
            out = model(inputs_embeds=leaf[None, None], past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1]
        total = torch.stack(logps).sum()
        grads = torch.autograd.grad(total, leaves)
    g = torch.cat([gr.reshape(-1, gr.shape[-1]) for gr in grads], dim=0)  # [P + fed, D]
    x = torch.cat([v.detach().reshape(-1, v.shape[-1]) for v in leaves], dim=0)
    n = len(prompt_ids) + len(ids)
    pad = n - g.shape[0]  # the last response token was not fed: zero gradient, as in teacher forcing
    if pad:
        g = torch.cat([g, g.new_zeros(pad, g.shape[1])])
        last = emb.weight[torch.tensor(ids[-pad:], device=lm.device)].detach()
        x = torch.cat([x, last])
    values = {m: ss.get_method(m).from_gradient(g[None], x[None])[0].cpu().numpy().astype(np.float32)
              for m in METHODS}
    return tuple(ids), values


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    lm = ss.load_model("default")
    row = next(r for r in datasets.load_jsonl(datasets.CASE_STUDIES_PATH) if "train leaves" in r["prompt"])
    chat = lm.format_prompt(row["prompt"])
    config = ss.GenerationConfig(max_new_tokens=args.max_new_tokens)
    print(f"load average before: {os.getloadavg()}")
    base_t, cand_t, lean_t = [], [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        gen, ref = baseline(lm, chat, config)
        base_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        ids, cand = generate_with_graph(lm, chat, config)
        cand_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        lean_ids, _ = lean_greedy_then_span(lm, chat, config)
        lean_t.append(time.perf_counter() - t)
        print(f"baseline {base_t[-1]:.2f} s, graph {cand_t[-1]:.2f} s, lean loop + span {lean_t[-1]:.2f} s", flush=True)
    t = time.perf_counter()
    lm.generate(chat, config)
    gen_only = time.perf_counter() - t
    diff = {m: float(np.max(np.abs(cand[m] - ref[m]))) for m in METHODS}
    rel = {m: diff[m] / float(np.max(np.abs(ref[m]))) for m in METHODS}
    print(json.dumps({
        "response_tokens": len(gen.ids), "same_ids": ids == gen.ids,
        "baseline_generate_plus_span_s": round(min(base_t), 3), "generation_only_s": round(gen_only, 3),
        "graph_generation_plus_one_backward_s": round(min(cand_t), 3),
        "ratio_candidate_vs_baseline": round(min(cand_t) / min(base_t), 2),
        "lean_greedy_loop_plus_span_s": round(min(lean_t), 3), "lean_same_ids": lean_ids == gen.ids,
        "ratio_candidate_vs_lean_loop": round(min(cand_t) / min(lean_t), 2),
        "max_abs_diff": diff, "max_rel_diff": rel,
        "allclose_rtol1e-4_atol1e-6": {m: bool(np.allclose(cand[m], ref[m], rtol=1e-4, atol=1e-6)) for m in METHODS},
    }, indent=2))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
