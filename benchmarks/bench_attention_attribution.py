"""Learned attention attribution against exact leave-one-out on held-out prompts, its cost, and its memory.

    .venv/bin/python benchmarks/bench_attention_attribution.py collect --out artifacts/attention_eval [--start 120 --pool 260] [--granularities line] [--limit 10]
    .venv/bin/python benchmarks/bench_attention_attribution.py collect --out artifacts/attention_eval --indices 60 71 --aopc-max-tokens 2400
    .venv/bin/python benchmarks/bench_attention_attribution.py table --out artifacts/attention_eval [--estimator F]
    .venv/bin/python benchmarks/bench_attention_attribution.py verify --out artifacts/attention_eval [--grid]
    .venv/bin/python benchmarks/bench_attention_attribution.py memory [--tokens 4000 8000]

collect: the first --n prompts of the held-out split (sequence_salience/attention/prompts.py, split "eval": names,
places and topics disjoint from the training split; none of the shipped rows), --min-tokens..--max-tokens long,
at sentence granularity up to --sentence-max-tokens, paragraph above (principles: line), filler removal. Per prompt:
exact leave one segment out (the reference), gradient norm of the whole target (one forward + backward; summed
over each segment's tokens), and the attention features (one forward with the hooks), each timed. One .npz per
prompt in --out (a rerun skips prompts already there). Up to --aopc-max-tokens, also the deletion / insertion
ablations of leave-one-out's, gradient norm's, and --estimator's (default: the shipped one) and its verified map's
orders (`aopc` adds the estimator's to prompts collected before, or after a refit).

table: applies the estimator (default: the shipped one for the default model) to the collected features and
prints, per method, the mean Spearman rank correlation with leave-one-out, top-1 agreement (same first segment)
and top-3 agreement (shared segments of the two top threes, out of 3), with the prompts' count, the notes prompts'
rank of the fact's segment, the paired difference to grad_norm (seeded bootstrap 95 % CI over prompts), and the median time of the attention map and of leave-one-out relative to one
forward + backward on the same prompt. Markdown.

verify: attention_verified's rule, simulated exactly from the collected prompts (their .npz hold exact leave-one-out
of every segment and the gradient norm, so verifying a segment is a lookup and the stop rule runs as in the method,
attention_verified.verify): the shipped rule and the ones it was chosen against (`RULES`), on the choice set
(held-out index < --unseen-from, 120: the prompts the rule was chosen on) and the unseen prompts (index >= 120)
separately, each per granularity: the figures of `table`, top-3 up to leave-one-out's noise
(agreement.noise_level, top_overlap_within), the mean number verified and the median share of leave-one-out's
forwards; with --grid also the grid the rule was chosen from (choice set only).

memory: peak resident-memory growth of the feature capture on a --tokens-long notes prompt, and of a plain
forward of the base model (no hooks) on the same tokens, each in a fresh child process (sampled every 5 ms).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from sequence_salience import scoring  # noqa: E402
from sequence_salience.ablation import PrefixScorer, segment_salience, span_recorder  # noqa: E402
from sequence_salience.attention import (FeatureInputs, agreement, capture_feature_sets, capture_features,  # noqa: E402
                                         estimator_for, load_estimator, span_rows)
from sequence_salience.attention.prompts import generate_prompt, long_notes_prompt  # noqa: E402
from sequence_salience.calibration import chat_prompt  # noqa: E402
from sequence_salience.methods import AblationConfig, attention_verified  # noqa: E402
from benchmarks.timing import timed  # noqa: E402

AOPC_K = 3  # deletion / insertion of each method's top 1..3 segments


def granularity(item, n_tokens: int, sentence_max: int) -> str:
    if item.kind == "principles":
        return "line"
    return "sentence" if n_tokens <= sentence_max else "paragraph"


def approx_segments(item, g: str) -> int:
    """A model-free count of the prompt's segments at `g` (for the order of the work only)."""
    text = (item.system or "") + "\n\n" + item.user
    if g == "paragraph":
        return len([p for p in re.split(r"\n\s*\n", text) if p.strip()])
    if g == "line":
        return len([p for p in text.split("\n") if p.strip()])
    return len([p for p in re.split(r"(?<=[.?!:])\s+", text) if p.strip()])


def plan(lm, args) -> list[tuple[int, object, str, int]]:
    """(index, prompt, granularity, tokens) of the --pool held-out candidates, in the order they are measured:
    by estimated cost (segments x tokens), --mix of the shorter ones (under --long-from tokens) for each one of
    the longer, so that the prompts that finish in the time there is cover the range. With --indices only those
    held-out indices are candidates (--start / --pool ignored; the filters and the order still apply)."""
    count = lambda text: len(lm.tokenize(text).ids)
    short, long_ = [], []
    for i in args.indices if args.indices is not None else range(args.start, args.pool):
        item = generate_prompt(args.seed, i, "eval", args.min_tokens, args.max_tokens, count)
        n = count(item.user) + (count(item.system) if item.system else 0)
        g = granularity(item, n, args.sentence_max_tokens)
        if (args.granularities and g not in args.granularities) or not args.length[0] <= n <= args.length[1]:
            continue
        entry = (i, item, g, n)
        (long_ if n >= args.long_from else short).append((approx_segments(item, g) * n, entry))
    short, long_ = [e for _, e in sorted(short, key=lambda x: x[0])], [e for _, e in sorted(long_, key=lambda x: x[0])]
    out = []
    while short or long_:
        out += short[:args.mix] + long_[:1]
        short, long_ = short[args.mix:], long_[1:]
    return out


class Ablations:
    """log p(target span) of any set of removed segments of one collected prompt (filler removal, prefix
    reuse), cached by the sorted tuple of removed segments."""

    def __init__(self, lm, prompt, loo, config: AblationConfig, known: dict | None = None):
        r = loo.result
        self.segs = scoring.prompt_segments(r, loo.granularity).matches_only()
        assert [tuple(t) for t in map(list, self.segs.tokens)] == [tuple(t) for t in map(list, loo.segment_tokens)]
        self.editor = scoring.PromptEditor(lm, prompt, r, self.segs, config.removal, scoring.filler_id(lm, config.filler))
        ids = [int(i) for i in r.ids]
        self.scorer = PrefixScorer(lm, ids[:r.n_prompt_tokens], ids[r.n_prompt_tokens:], loo.span,
                                   batch_size=config.batch_size, chunk_token_budget=config.chunk_token_budget)
        self.logp: dict[tuple[int, ...], float] = {(): float(loo.original_logprob)}
        if known is not None:
            self.logp.update(known)
        else:  # loo is leave one out: its values give every single removal
            for s, lp in enumerate(loo.original_logprob - loo.values):
                self.logp[(s,)] = float(lp)

    def need(self, sets) -> None:
        todo = [tuple(sorted(x)) for x in sets]
        todo = list(dict.fromkeys(t for t in todo if t not in self.logp))
        if todo:
            for t, lp in zip(todo, self.scorer([self.editor(t) for t in todo])):
                self.logp[t] = float(lp)

    def arrays(self, n_segments: int) -> tuple[np.ndarray, np.ndarray]:
        keys = list(self.logp)
        removed = np.zeros((len(keys), n_segments), dtype=bool)
        for row, k in enumerate(keys):
            removed[row, list(k)] = True
        return removed, np.array([self.logp[k] for k in keys])


def collect(args) -> None:
    """Per held-out prompt: leave-one-out, gradient norm, the attention features (span rows and the last
    segment's rows), and the deletion / insertion ablations of leave-one-out's and gradient norm's orders."""
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm = ss.load_model(args.model)
    est = load_estimator(args.estimator) if args.estimator else estimator_for(ss.model.DEFAULT_MODEL_DESCRIPTION)
    todo = plan(lm, args)
    print(f"{len(todo)} candidates; order: " + " ".join(f"{i}:{n}" for i, _, _, n in todo), flush=True)
    config = AblationConfig()
    measured = 0
    for done, (i, item, g, n) in enumerate(todo):
        path = out / f"eval-{args.seed}-{i:04d}.npz"
        if path.exists():
            continue
        if args.limit is not None and measured >= args.limit:
            break
        measured += 1
        prompt = chat_prompt(lm, item)
        t = time.perf_counter()
        loo = segment_salience(lm, prompt, item.target, "leave_one_out", granularity=g, config=config)
        loo_s = time.perf_counter() - t
        r = loo.result
        t = time.perf_counter()
        grad = ss.compute_span_salience(lm, prompt, item.target, "grad_norm")  # [N]
        grad_s = time.perf_counter() - t
        question = [int(x) for x in loo.segment_tokens[-1]]
        t = time.perf_counter()
        features, qfeatures = capture_feature_sets(lm.model, r.ids, [span_rows(r.n_prompt_tokens, loo.span), question],
                                                   loo.segment_tokens)
        att_s = time.perf_counter() - t
        grad_seg = np.array([grad[toks].sum() for toks in loo.segment_tokens])
        S = len(loo.values)
        abl = Ablations(lm, prompt, loo, config)
        sets = [tuple(range(S))]
        maps = estimated_maps(est, FeatureInputs(span=features, question=qfeatures,
                                                 sizes=np.array([len(x) for x in loo.segment_tokens])),
                              loo.span[1] - loo.span[0], loo.values, grad_seg)
        for v in (loo.values, grad_seg, *maps.values()):  # the estimator's orders too: no `aopc` pass needed
            d, ins = agreement.perturbation_sets(v, AOPC_K)
            sets += d + ins
        t = time.perf_counter()
        if n <= args.aopc_max_tokens:  # insertion rows are full forwards: as costly as leave-one-out itself
            abl.need(sets)
        aopc_s = time.perf_counter() - t
        removed, logps = abl.arrays(S)
        fact = -1
        if item.kind == "notes":  # the segment holding the fact's sentence
            start = loo.text.index(item.target.strip())
            fact = next(k for k, (s, e) in enumerate(loo.segments) if s <= start < e)
        np.savez(path, loo=loo.values, grad_norm=grad_seg, features=features, qfeatures=qfeatures,
                 seg_sizes=np.array([len(x) for x in loo.segment_tokens]),
                 seg_starts=np.array([int(x[0]) for x in loo.segment_tokens]), n_prompt_tokens=r.n_prompt_tokens,
                 original_logprob=loo.original_logprob, span_tokens=loo.span[1] - loo.span[0],
                 removed=removed, removed_logprob=logps,
                 loo_s=loo_s, grad_s=grad_s, att_s=att_s, aopc_s=aopc_s, n_tokens=len(r.ids), fact_segment=fact,
                 meta=np.asarray(json.dumps({"id": item.id, "kind": item.kind, "granularity": g,
                                             "min_tokens": args.min_tokens, "max_tokens": args.max_tokens})))
        print(f"[{done + 1}/{len(todo)}] {item.id} {item.kind} {len(r.ids)} tokens, {S} {g}s: leave-one-out "
              f"{loo_s:.1f} s, forward+backward {grad_s:.1f} s, attention {att_s:.1f} s, aopc {aopc_s:.1f} s "
              f"({time.strftime('%H:%M:%S')})", flush=True)


METHODS = ("attention_attribution", "attention_verified", "grad_norm")


def estimated_maps(est, inputs: FeatureInputs, span_tokens: int, loo: np.ndarray, gradient: np.ndarray
                   ) -> dict[str, np.ndarray]:
    """The estimator-dependent maps of one collected prompt: the estimate (est over its stored features) and
    attention_verified's (its rule over the estimate and the segments' gradient norm, the verified values looked up
    in leave-one-out, `verified_map`)."""
    estimate = est.values(inputs, span_tokens)
    return {"attention_attribution": estimate,
            "attention_verified": verified_map(estimate, gradient, loo, SHIPPED)[0]}


def load_rows(folder: Path, est) -> list[dict]:
    """The collected prompts with every method's values: the estimate (est over the stored features), verified
    (attention_verified's rule simulated from the stored leave-one-out and gradient norm, `verified_map`: what the
    method computes, tests/unit/test_attention_agreement.py) and gradient norm."""
    rows = []
    for path in sorted(folder.glob("eval-*.npz")):
        with np.load(path) as z:
            d = {k: z[k] for k in z.files}
        d["path"] = path
        d["meta"] = json.loads(str(d["meta"]))
        inputs = FeatureInputs(span=d["features"], question=d.get("qfeatures"), sizes=d.get("seg_sizes"))
        d.update(estimated_maps(est, inputs, int(d["span_tokens"]), d["loo"], d["grad_norm"]))
        d["leave_one_out"] = d["loo"]
        d["logp"] = {tuple(int(i) for i in np.flatnonzero(r)): float(v)
                     for r, v in zip(d["removed"], d["removed_logprob"])}
        rows.append(d)
    return rows


BANDS = ((300, 1000), (1000, 2000), (2000, 4000))  # length bands of the report (tokens with the chat template)


def prompt_groups(rows: list[dict], unseen_from: int | None = None) -> dict[str, list[int]]:
    """The report's groups of collected prompts (indices into rows): all, each granularity, each length band of
    BANDS (a prompt longer than the last band's end counts in it), and with `unseen_from` the prompts of that
    held-out index on (collected after attention_verified's rule was chosen)."""
    groups: dict[str, list[int]] = {"all": list(range(len(rows)))}
    for i, r in sorted(enumerate(rows), key=lambda x: x[1]["meta"]["granularity"]):
        groups.setdefault(r["meta"]["granularity"], []).append(i)
    for low, high in BANDS:
        last = (low, high) == BANDS[-1]
        idx = [i for i, r in enumerate(rows) if low <= int(r["n_tokens"]) < high or (last and int(r["n_tokens"]) >= high)
               or ((low, high) == BANDS[0] and int(r["n_tokens"]) < low)]
        if idx:
            groups[f"{low:,}-{high:,} tokens"] = idx
    if unseen_from is not None:
        idx = [i for i, r in enumerate(rows) if int(r["meta"]["id"].split("-")[2]) >= unseen_from]
        if idx:
            groups[f"index >= {unseen_from} (unseen by the choice of attention_verified's rule)"] = idx
    return groups


def prompt_figures(d: dict, m: str) -> dict[str, float]:
    """Spearman, top-1, top-3 with leave-one-out and deletion / insertion AOPC (NaN where an ablation is missing)."""
    v, loo = d[m], d["loo"]
    try:
        dele, ins = agreement.aopc(v, d["logp"], AOPC_K)
    except KeyError:
        dele, ins = float("nan"), float("nan")
    return {"spearman": agreement.spearman(v, loo), "top1": agreement.top_overlap(v, loo, 1),
            "top3": agreement.top_overlap(v, loo, 3), "deletion": dele, "insertion": ins}


def aopc_fill(args) -> None:
    """Measures the deletion / insertion ablations of the estimate's and the verified map's orders (they depend on
    the estimator) for every collected prompt that lacks them; written back into the prompt's .npz."""
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(args.threads)
    est = load_estimator(args.estimator) if args.estimator else estimator_for(ss.model.DEFAULT_MODEL_DESCRIPTION)
    lm = ss.load_model(args.model)
    count = lambda text: len(lm.tokenize(text).ids)
    config = AblationConfig()
    for d in load_rows(Path(args.out), est):
        S = len(d["loo"])
        if tuple(range(S)) not in d["logp"]:  # collected without the deletion / insertion ablations (too long)
            continue
        sets = [tuple(range(S))]
        for m in ("attention_attribution", "attention_verified"):
            dl, ins = agreement.perturbation_sets(d[m], AOPC_K)
            sets += dl + ins
        todo = [x for x in dict.fromkeys(sets) if x not in d["logp"]]
        if not todo:
            continue
        meta = d["meta"]
        seed, index = (int(x) for x in meta["id"].split("-")[1:3])
        item = generate_prompt(seed, index, "eval", meta.get("min_tokens", 300), meta.get("max_tokens", 4000), count)
        assert item.id == meta["id"]
        prompt = chat_prompt(lm, item)
        loo = segment_salience(lm, prompt, item.target, "attention_attribution", granularity=meta["granularity"],
                               config=config)
        abl = Ablations(lm, prompt, loo, config, d["logp"])
        assert abs(loo.original_logprob - d["logp"][()]) < 1e-3, (loo.original_logprob, d["logp"][()])
        t = time.perf_counter()
        abl.need(todo)
        removed, logps = abl.arrays(S)
        z = {k: v for k, v in d.items() if k not in ("path", "meta", "logp", "leave_one_out", *METHODS[:2])}
        z.update(removed=removed, removed_logprob=logps, meta=np.asarray(json.dumps(meta)))
        np.savez(d["path"], **z)
        print(f"{meta['id']}: {len(todo)} more ablations, {time.perf_counter() - t:.1f} s", flush=True)


def table(args) -> None:
    est = load_estimator(args.estimator) if args.estimator else estimator_for(ss.model.DEFAULT_MODEL_DESCRIPTION)
    rows = load_rows(Path(args.out), est)
    if not rows:
        sys.exit(f"no collected prompts in {args.out}")
    methods = (*METHODS, "leave_one_out")
    print(f"{len(rows)} held-out prompts, {min(int(r['n_tokens']) for r in rows)}-"
          f"{max(int(r['n_tokens']) for r in rows)} tokens (median {np.median([int(r['n_tokens']) for r in rows]):.0f}),"
          f" {min(len(r['loo']) for r in rows)}-{max(len(r['loo']) for r in rows)} segments; estimator: {est.model}, "
          f"features {'+'.join(est.features)}, {int(est.quality.get('prompts', 0))} training prompts, cv R² "
          f"{est.quality.get('cv_r2', float('nan')):.2f}\n")
    figures = {m: [prompt_figures(r, m) for r in rows] for m in methods}
    groups = prompt_groups(rows, args.unseen_from)
    granularities = {r["meta"]["granularity"] for r in rows}
    print("Prompts by granularity and kind: " + "; ".join(
        f"{g} {len(groups[g])} (" + ", ".join(f"{k} {n}" for k, n in sorted(
            {k: sum(rows[i]["meta"]["kind"] == k for i in groups[g]) for k in {rows[i]["meta"]["kind"] for i in
                                                                             groups[g]}}.items())) + ")"
        for g in sorted(granularities)) + "; by length: " + ", ".join(
        f"{g} {len(idx)}" for g, idx in groups.items() if g.endswith(" tokens")) + "\n")
    print("| granularity | n | method | Spearman (mean, min–max) | top-1 | top-3 | deletion AOPC | insertion AOPC | "
          "fact first (notes) |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    published = {}
    for g, idx in groups.items():
        notes = [i for i in idx if int(rows[i]["fact_segment"]) >= 0]
        for m in methods:
            f = [figures[m][i] for i in idx]
            rho = np.array([x["spearman"] for x in f])
            mean = lambda k: float(np.nanmean([x[k] for x in f])) if any(np.isfinite(x[k]) for x in f) else float("nan")
            n_aopc = sum(np.isfinite(x["deletion"]) for x in f)
            fact = sum(int(np.argmax(rows[i][m])) == int(rows[i]["fact_segment"]) for i in notes)
            print(f"| {g} | {len(idx)} | {m} | {np.nanmean(rho):.2f} ({np.nanmin(rho):.2f}–{np.nanmax(rho):.2f}) | "
                  f"{mean('top1'):.2f} | {mean('top3'):.2f} | {mean('deletion'):.2f} (n={n_aopc}) | "
                  f"{mean('insertion'):.2f} | {fact}/{len(notes)} |")
            if g in granularities and m != "leave_one_out":
                published.setdefault(g, {})[m] = {"n": len(idx), "spearman": round(float(np.nanmean(rho)), 3),
                                                  "top1": round(mean("top1"), 3), "top3": round(mean("top3"), 3)}
    print()
    for m in METHODS[:2]:
        for ref in ("grad_norm", "leave_one_out"):
            for k in ("spearman", "top1", "top3", "deletion", "insertion"):
                if ref == "leave_one_out" and k in ("spearman", "top1", "top3"):
                    continue
                mean, low, high, n = agreement.paired_bootstrap([x[k] for x in figures[m]],
                                                                [x[k] for x in figures[ref]])
                print(f"{k}: {m} minus {ref} {mean:+.2f} (95 % CI {low:+.2f} to {high:+.2f}; paired bootstrap over "
                      f"{n} prompts)")
    for k in ("deletion", "insertion"):
        mean, low, high, n = agreement.paired_bootstrap([x[k] for x in figures["grad_norm"]],
                                                        [x[k] for x in figures["leave_one_out"]])
        print(f"{k}: grad_norm minus leave_one_out {mean:+.2f} (95 % CI {low:+.2f} to {high:+.2f}; {n} prompts)")
    att = np.median([float(r["att_s"] / r["grad_s"]) for r in rows])
    loo = np.median([float(r["loo_s"] / r["grad_s"]) for r in rows])
    print(f"\nCost, median over prompts of the time relative to one forward + backward of the same prompt: attention "
          f"features {att:.2f}×, exact leave-one-out {loo:.2f}× (median forward + backward "
          f"{np.median([float(r['grad_s']) for r in rows]):.1f} s).")
    by_kind: dict[str, list[float]] = {}
    for r, f in zip(rows, figures["attention_attribution"]):
        by_kind.setdefault(r["meta"]["kind"], []).append(f["spearman"])
    print("Spearman of attention_attribution by kind: " + ", ".join(
        f"{k} {np.nanmean(v):.2f} (n={len(v)})" for k, v in sorted(by_kind.items())))
    if args.json:
        doc = {"source": f"benchmarks/bench_attention_attribution.py table (docs/benchmarks.md, 'Learned attention "
                         f"attribution'): {len(rows)} held-out prompts (split eval, seed 0, "
                         f"{min(int(r['n_tokens']) for r in rows)}-{max(int(r['n_tokens']) for r in rows)} tokens with "
                         "the chat template: " + ", ".join(f"{g} {len(idx)}" for g, idx in groups.items()
                                                           if g.endswith(" tokens")) + "), "
                         "each counted at the granularity it was measured at (sentence up to 800 tokens, paragraph "
                         "above, principles by line), against exact leave-one-out; attention_attribution with the "
                         f"shipped estimator {est.training_hash[:16]} ({'+'.join(est.features)}), attention_verified "
                         "with its rule (candidates alternating between the estimate and the gradient, "
                         f"{SHIPPED.verify_min}-{SHIPPED.verify_max} verified until the top three is unchanged for "
                         f"{SHIPPED.verify_patience}; their values looked up in the prompt's leave-one-out), grad_norm "
                         "summed over each segment's tokens",
               "granularities": published}
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")


@dataclasses.dataclass(frozen=True)
class Rule:
    """A verification rule simulated by `verify`: the candidates' order ("estimate", "gradient" or "alternating",
    attention_verified.candidates) and the stop rule's settings (a fixed top k: verify_min = verify_max = k)."""

    name: str
    order: str
    settings: attention_verified.Settings


SHIPPED = attention_verified.DEFAULTS  # the rule attention_verified runs with by default
TOP7 = attention_verified.Settings(7, 7, 7)
RULES = (Rule("estimate top 7 (before session 32)", "estimate", TOP7), Rule("gradient top 7", "gradient", TOP7),
         Rule("alternating top 7", "alternating", TOP7),
         Rule("alternating, adaptive (shipped)", "alternating", SHIPPED),
         Rule("estimate, adaptive (5, 3, 15)", "estimate", attention_verified.Settings(5, 3, 15)))
CHOICE_SET_END = 120  # held-out index below which the prompts are the choice set of the rule (the rest: unseen)


def candidate_order(estimate: np.ndarray, gradient: np.ndarray, order: str) -> list[int]:
    """The segments in the order `order` verifies them."""
    if order == "alternating":
        return attention_verified.candidates(estimate, gradient)
    return agreement.order({"estimate": estimate, "gradient": gradient}[order])


def verified_map(estimate: np.ndarray, gradient: np.ndarray, loo: np.ndarray, settings: attention_verified.Settings,
                 order: str = "alternating") -> tuple[np.ndarray, int]:
    """attention_verified's values on a collected prompt and how many segments it verified: its stop rule
    (attention_verified.verify) over the candidates, each verification a lookup in the prompt's exact
    leave-one-out `loo`, the estimate elsewhere (attention_verified.combine)."""
    picked, exact = attention_verified.verify(candidate_order(estimate, gradient, order),
                                              lambda segments: loo[segments], settings)
    return attention_verified.combine(estimate, picked, exact), len(picked)


def rule_figures(rows: list[dict], idx, rule: Rule | None, noise_sigmas: float) -> dict[str, float]:
    """Mean figures over the prompts `idx` of attention_verified under `rule` (None: gradient norm): Spearman,
    top-1, top-3, top-3 up to noise_sigmas x leave-one-out's noise level, the mean number verified and the median
    share of leave-one-out's forwards (1 + verified against 1 + S: the unedited prompt's forward counted in both;
    the gradient's forward + backward not counted)."""
    out = {"spearman": [], "top1": [], "top3": [], "top3_noise": [], "verified": [], "forwards": []}
    for i in idx:
        d = rows[i]
        loo, S = d["loo"], len(d["loo"])
        if rule is None:
            v = d["grad_norm"]
        else:
            v, n = verified_map(d["attention_attribution"], d["grad_norm"], loo, rule.settings, rule.order)
            out["verified"].append(n)
            out["forwards"].append((1 + n) / (1 + S))
        out["spearman"].append(agreement.spearman(v, loo))
        out["top1"].append(agreement.top_overlap(v, loo, 1))
        out["top3"].append(agreement.top_overlap(v, loo, 3))
        out["top3_noise"].append(agreement.top_overlap_within(v, loo, 3, noise_sigmas * agreement.noise_level(loo)))
    return {m: float(np.median(x) if m == "forwards" else np.nanmean(x)) if x else float("nan")
            for m, x in out.items()}


def held_out_index(d: dict) -> int:
    """The collected prompt's index in the held-out split (its id's third part)."""
    return int(d["meta"]["id"].split("-")[2])


def verify(args) -> None:
    est = load_estimator(args.estimator) if args.estimator else estimator_for(ss.model.DEFAULT_MODEL_DESCRIPTION)
    rows = load_rows(Path(args.out), est)
    if not rows:
        sys.exit(f"no collected prompts in {args.out}")
    sig = args.noise_sigmas
    sets = {"choice set": [i for i, r in enumerate(rows) if held_out_index(r) < args.unseen_from],
            "unseen": [i for i, r in enumerate(rows) if held_out_index(r) >= args.unseen_from]}
    groups = {}
    for name, idx in sets.items():
        groups[f"{name}, all"] = idx
        for g in sorted({rows[i]["meta"]["granularity"] for i in idx}):
            groups[f"{name}, {g}"] = [i for i in idx if rows[i]["meta"]["granularity"] == g]
    print(f"{len(rows)} held-out prompts ({len(sets['choice set'])} of index < {args.unseen_from}: the choice set of "
          f"the rule; {len(sets['unseen'])} unseen), {min(len(r['loo']) for r in rows)}-"
          f"{max(len(r['loo']) for r in rows)} segments (median {np.median([len(r['loo']) for r in rows]):.0f}); "
          f"attention_verified's rule: alternating, verify_min {SHIPPED.verify_min}, verify_patience "
          f"{SHIPPED.verify_patience}, verify_max {SHIPPED.verify_max}; noise: {sig:g} x leave-one-out's noise level\n")
    print("| prompts | n | map | mean verified | Spearman | top-1 | top-3 | top-3 up to noise | forwards / "
          "leave-one-out's |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for g, idx in groups.items():
        if not idx:
            continue
        for rule in (None, *RULES):
            f = rule_figures(rows, idx, rule, sig)
            name, k = ("grad_norm", "-") if rule is None else (rule.name, f"{f['verified']:.1f}")
            fw = "1 forward + backward" if rule is None else f"{f['forwards']:.2f}"
            print(f"| {g} | {len(idx)} | {name} | {k} | {f['spearman']:.2f} | {f['top1']:.2f} | {f['top3']:.2f} | "
                  f"{f['top3_noise']:.2f} | {fw} |")
    shipped = next(r for r in RULES if r.settings == SHIPPED and r.order == "alternating")
    print()
    for g, idx in groups.items():
        if len(idx) < 2:
            continue
        for ref in (None, RULES[0]):
            for m, fig in (("top3", lambda v, loo: agreement.top_overlap(v, loo, 3)), ("spearman", agreement.spearman)):
                ref_maps = [rows[i]["grad_norm"] if ref is None else verified_map(
                    rows[i]["attention_attribution"], rows[i]["grad_norm"], rows[i]["loo"], ref.settings, ref.order)[0]
                            for i in idx]
                mean, low, high, n = agreement.paired_bootstrap(
                    [fig(verified_map(rows[i]["attention_attribution"], rows[i]["grad_norm"], rows[i]["loo"],
                                      shipped.settings)[0], rows[i]["loo"]) for i in idx],
                    [fig(v, rows[i]["loo"]) for v, i in zip(ref_maps, idx)])
                print(f"{g}: {m} of the shipped rule minus {'grad_norm' if ref is None else ref.name} {mean:+.2f} "
                      f"(95 % CI {low:+.2f} to {high:+.2f}; paired bootstrap over {n} prompts)")
    gaps = np.array([(np.sort(r["loo"])[::-1][2] - np.sort(r["loo"])[::-1][3], agreement.noise_level(r["loo"]))
                     for r in rows if len(r["loo"]) > 4])
    print(f"\nLeave-one-out's 3rd minus its 4th within 1 x its noise level on {np.mean(gaps[:, 0] < gaps[:, 1]):.2f} "
          f"of the prompts, within 2 x on {np.mean(gaps[:, 0] < 2 * gaps[:, 1]):.2f} (median noise level "
          f"{np.median(gaps[:, 1]):.2f} nats, median gap {np.median(gaps[:, 0]):.2f}; {len(gaps)} prompts)")
    if args.grid:  # the grid the rule was chosen from: the choice set only
        choice = sets["choice set"]
        grans = sorted({rows[i]["meta"]["granularity"] for i in choice})
        print(f"\nGrid on the choice set ({len(choice)} prompts): top-3 (all, " + ", ".join(grans) + ") and mean "
              "verified\n\n| order | verify_min | patience | verify_max | mean verified | top-3 | " +
              " | ".join(grans) + " |\n|---|---:|---:|---:|---:|---:|" + "---:|" * len(grans))
        for order in ("alternating", "estimate", "gradient"):
            for kmin in (3, 4, 5, 6):
                for patience in (2, 3, 4):
                    for kmax in (7, 10, 12, 15, 20, 99):
                        rule = Rule("", order, attention_verified.Settings(kmin, patience, kmax))
                        f = rule_figures(rows, choice, rule, sig)
                        per = [rule_figures(rows, [i for i in choice if rows[i]["meta"]["granularity"] == g], rule,
                                            sig)["top3"] for g in grans]
                        print(f"| {order} | {kmin} | {patience} | {kmax} | {f['verified']:.1f} | {f['top3']:.2f} | " +
                              " | ".join(f"{x:.2f}" for x in per) + " |", flush=True)


CHILD = r"""
import sys, threading, time, os, torch, json
torch.set_num_threads(int(sys.argv[3]))
import sequence_salience as ss
from sequence_salience.attention import capture_features, span_rows
from sequence_salience.attention.prompts import generate_prompt
from sequence_salience.calibration import chat_prompt
lm = ss.load_model("default")
n = int(sys.argv[1])
count = lambda text: len(lm.tokenize(text).ids)
item = generate_prompt(1, 0, "eval", n - 60, n - 40, count, kind="notes")
prompt = chat_prompt(lm, item)
ids = list(lm.encode_prompt(prompt).ids) + list(lm.tokenize(item.target).ids)
ids = ids[:n]
P = len(ids) - 12
paras, start = [], 1
for k in range(P // 100):
    paras.append(list(range(1 + 100 * k, 1 + 100 * (k + 1))))
page = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
peak = [0]
stop = [False]
def sample():
    while not stop[0]:
        peak[0] = max(peak[0], page()); time.sleep(0.005)
torch.manual_seed(0)
base = page()
th = threading.Thread(target=sample); th.start()
t = time.perf_counter()
if sys.argv[2] == "features":
    f = capture_features(lm.model, ids, span_rows(P, (0, 12)), paras)
else:
    with torch.no_grad():
        lm.model.base_model(input_ids=torch.tensor([ids]), use_cache=False)
s = time.perf_counter() - t
stop[0] = True; th.join()
print(json.dumps({"tokens": len(ids), "what": sys.argv[2], "peak_growth_mb": (peak[0] - base) / 2**20, "seconds": s}))
"""


def memory(args) -> None:
    for n in args.tokens:
        for what in ("forward", "features"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(n), what, str(args.threads)], capture_output=True,
                                 text=True, check=True, cwd=Path(__file__).resolve().parents[1])
            print(out.stdout.strip().splitlines()[-1], flush=True)


VARIANTS = (("span",), ("share",), ("span", "position"), ("span", "question"), ("span", "share"),
            ("span", "question", "position"), ("span", "share", "question", "position"))


def cv(args) -> None:
    """Feature blocks compared on the calibration prompts only (never the held-out ones): prompt-grouped
    cross-validation (prompt i in fold i % 5), the ridge weight chosen inside each training fold; the held-out
    prompts' R² of all their ablations, and the rank agreement of the fitted map with their leave-one-out rows."""
    from sequence_salience.attention.estimator import ALPHAS, design_features, feature_inputs, fit_weights  # noqa
    from sequence_salience.calibration import PROMPTS_DIR, load_record  # pylint: disable=import-outside-toplevel

    records = [r for r in (load_record(p) for p in sorted((Path(args.calibration) / PROMPTS_DIR).glob("*.npz")))
               if r is not None]
    data = [r.data for r in records]
    print(f"{len(data)} calibration prompts, {sum(len(d.logprobs) for d in data)} ablations")
    print("| features | cv R² (alpha chosen on all) | held-out Spearman with leave-one-out | top-1 | top-3 |")
    print("|---|---:|---:|---:|---:|")
    k = min(5, len(data))
    for blocks in VARIANTS:
        if "question" in blocks and any(d.qfeatures is None for d in data):
            continue
        _, _, quality = fit_weights(data, ALPHAS, blocks=blocks)
        rho, t1, t3 = [], [], []
        for f in range(k):
            train = [d for i, d in enumerate(data) if i % k != f]
            w, _, _ = fit_weights(train, ALPHAS, blocks=blocks)
            for i, d in enumerate(data):
                if i % k != f:
                    continue
                S = d.kept.shape[1]
                loo_rows = [r for r in range(len(d.kept)) if (~d.kept[r]).sum() == 1]
                loo = np.full(S, np.nan)
                for r in loo_rows:
                    loo[int(np.flatnonzero(~d.kept[r])[0])] = d.original_logprob - d.logprobs[r]
                if np.isnan(loo).any() or S < 4:
                    continue
                v = d.span_tokens * (design_features(blocks, feature_inputs(d)) @ w)
                rho.append(agreement.spearman(v, loo))
                t1.append(agreement.top_overlap(v, loo, 1))
                t3.append(agreement.top_overlap(v, loo, 3))
        print(f"| {'+'.join(blocks)} | {quality['cv_r2']:.3f} | {np.nanmean(rho):.3f} (n={len(rho)}) | "
              f"{np.mean(t1):.2f} | {np.mean(t3):.2f} |", flush=True)


def goal(args) -> None:
    """The cost goal (issue 42): a --tokens-long notes prompt of --paragraphs paragraphs with one planted fact; exact
    leave one paragraph out (cached in --out, it is long), then --repeats rounds of one forward + backward (grad_norm
    of the whole target, the first highlight's cost) and each fast method, interleaved, times as ratios within a
    round. Each method gets the first highlight's result, as the server passes it (attention_verified reads the
    span's gradient from it: no backward of its own; the first method also takes the unedited prompt's keys, values
    and span attention that the recorded pass left: no unedited forward); with --no-highlight it does not (the CLI's and the library's
    cost: attention_verified runs its own forward + backward)."""
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(args.threads)
    lm = ss.load_model(args.model)
    count = lambda text: len(lm.tokenize(text).ids)
    item = long_notes_prompt(args.seed, args.tokens, args.paragraphs, count=count)
    prompt = chat_prompt(lm, item)
    config = AblationConfig(attention_estimator=args.estimator, verify_min=args.verify_min,
                            verify_patience=args.verify_patience, verify_max=args.verify_max)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / f"goal-{item.id}.npz"
    if cache.exists():
        with np.load(cache) as z:
            loo_values, loo_s, fact = z["loo"], float(z["loo_s"]), int(z["fact"])
    elif args.skip_loo:  # timing only; the top-three comparison needs the cached leave-one-out (`goal` without it)
        loo_values, loo_s, fact = None, float("nan"), -1
    else:
        t = time.perf_counter()
        loo = segment_salience(lm, prompt, item.target, "leave_one_out", granularity="paragraph", config=config)
        loo_s = time.perf_counter() - t
        start = loo.text.index(item.target.strip())
        fact = next(k for k, (s, e) in enumerate(loo.segments) if s <= start < e)
        loo_values = loo.values
        np.savez(cache, loo=loo_values, loo_s=loo_s, fact=fact, n_tokens=loo.n_tokens)
    if loo_values is not None:
        print(f"{item.id}: {len(loo_values)} paragraphs; the fact in paragraph {fact}; leave-one-out ranks it "
              f"{agreement.order(loo_values).index(fact) + 1}, its top three {agreement.order(loo_values)[:3]}; "
              f"leave-one-out took {loo_s:.0f} s")
    print("| round | forward + backward (s) | method | seconds | × forward + backward | fact's rank | shared of "
          "leave-one-out's top 3 | Spearman |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for rep in range(args.repeats):
        highlight, fb = timed(lambda: ss.compute_span_result(lm, prompt, item.target, methods=("grad_norm",),
                                                             record=None if args.no_highlight else span_recorder))
        for method in args.methods:
            seg, sec = timed(lambda: segment_salience(lm, prompt, item.target, method, granularity="paragraph",
                                                      config=config, result=None if args.no_highlight else highlight))
            if fact < 0:  # without leave-one-out: the fact's paragraph from the text
                start = seg.text.index(item.target.strip())
                fact = next(k for k, (a, b) in enumerate(seg.segments) if a <= start < b)
            shared = "n/a" if loo_values is None else f"{round(3 * agreement.top_overlap(seg.values, loo_values, 3))}/3"
            rho = "n/a" if loo_values is None else f"{agreement.spearman(seg.values, loo_values):.2f}"
            print(f"| {rep + 1} | {fb:.1f} | {method} | {sec:.1f} | {sec / fb:.2f} | "
                  f"{agreement.order(seg.values).index(fact) + 1} | {shared} | {rho} | top three "
                  f"{agreement.order(seg.values)[:3]}, {seg.stats.rows} rows |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--model", default="default")
    c.add_argument("--pool", type=int, default=120, help="held-out candidates (indices --start..--pool-1)")
    c.add_argument("--start", type=int, default=0, help="first prompt index")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--min-tokens", type=int, default=300)
    c.add_argument("--max-tokens", type=int, default=4000)
    c.add_argument("--sentence-max-tokens", type=int, default=800)
    c.add_argument("--long-from", type=int, default=1200, help="prompts this long or longer are the 'longer' queue")
    c.add_argument("--mix", type=int, default=5, help="shorter prompts measured per longer one")
    c.add_argument("--aopc-max-tokens", type=int, default=800,
                   help="deletion / insertion ablations only for prompts up to this long (they cost as much as "
                        "leave-one-out)")
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--length", type=int, nargs=2, default=(0, 10**9), metavar=("MIN", "MAX"),
                   help="measure only the candidates of MIN..MAX tokens (a filter on the pool: --min-tokens / "
                        "--max-tokens shape the generated prompts themselves)")
    c.add_argument("--limit", type=int, default=None, help="stop after measuring this many new prompts")
    c.add_argument("--indices", type=int, nargs="+", default=None,
                   help="measure only these held-out indices (e.g. prompts already in the held-out set, re-collected "
                        "with a larger --aopc-max-tokens); --start / --pool are then ignored")
    c.add_argument("--granularities", nargs="+", choices=("sentence", "paragraph", "line"), default=None,
                   help="measure only the candidates of these granularities (chosen by the prompt's kind and length, "
                        "never by its result): to fill a granularity short of the bar's min_n")
    c.add_argument("--estimator", default=None,
                   help="whose orders' deletion / insertion ablations are measured too (default: the shipped one)")
    t = sub.add_parser("table")
    t.add_argument("--out", required=True)
    t.add_argument("--estimator", default=None)
    t.add_argument("--json", default=None, help="also write the per-granularity figures (held_out_agreement.json)")
    t.add_argument("--unseen-from", type=int, default=None,
                   help="also report the prompts of this held-out index on (collected after attention_verified's rule "
                        "was chosen)")
    a = sub.add_parser("aopc")
    a.add_argument("--out", required=True)
    a.add_argument("--estimator", default=None)
    a.add_argument("--model", default="default")
    a.add_argument("--threads", type=int, default=1)
    w = sub.add_parser("verify")
    w.add_argument("--out", required=True)
    w.add_argument("--estimator", default=None)
    w.add_argument("--noise-sigmas", type=float, default=1.0,
                   help="'up to noise': within this many x leave-one-out's noise level of its 3rd")
    w.add_argument("--grid", action="store_true", help="also the grid of rules the shipped one was chosen from")
    w.add_argument("--unseen-from", type=int, default=CHOICE_SET_END,
                   help="held-out index from which the prompts are unseen by the choice of the rule (the rest: the "
                        "choice set)")
    m = sub.add_parser("memory")
    m.add_argument("--tokens", type=int, nargs="+", default=[4000, 8000])
    m.add_argument("--threads", type=int, default=1)
    v = sub.add_parser("cv")
    v.add_argument("--calibration", required=True, help="a `sequence-salience calibrate --out` folder")
    g = sub.add_parser("goal")
    g.add_argument("--out", required=True, help="folder of the cached leave-one-out of the goal's prompt")
    g.add_argument("--model", default="default")
    g.add_argument("--estimator", default=None)
    g.add_argument("--tokens", type=int, default=4000)
    g.add_argument("--paragraphs", type=int, default=34)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--repeats", type=int, default=2)
    g.add_argument("--methods", nargs="+", default=["attention_attribution", "attention_verified"])
    g.add_argument("--threads", type=int, default=1)
    g.add_argument("--verify-min", type=int, default=SHIPPED.verify_min, help="attention_verified's stop rule")
    g.add_argument("--verify-patience", type=int, default=SHIPPED.verify_patience)
    g.add_argument("--verify-max", type=int, default=SHIPPED.verify_max)
    g.add_argument("--skip-loo", action="store_true", help="time the methods without leave-one-out's cache")
    g.add_argument("--no-highlight", action="store_true",
                   help="do not pass the first highlight's result to the methods (attention_verified's own backward)")
    args = p.parse_args()
    {"collect": collect, "table": table, "aopc": aopc_fill, "memory": memory, "goal": goal, "cv": cv,
     "verify": verify}[args.command](args)


if __name__ == "__main__":
    main()
