"""Coarse-to-fine leave one word out against full leave one word out: forwards, seconds, top five (issue 42 §2).

    .venv/bin/python benchmarks/bench_coarse_to_fine.py [--cases constitutional long] [--k 5]   # live
    .venv/bin/python benchmarks/bench_coarse_to_fine.py --record [--cases ...]   # record removal values (model)
    .venv/bin/python benchmarks/bench_coarse_to_fine.py --replay [--cases ...]   # replay search rules (seconds)

Cases: the three long shipped case studies (few-shot with its mislabeled exemplar, chain of thought with the
model's greedy answer of 32 tokens at most, constitutional principles; chat template as the app formats them)
and a long notes + question prompt of ten paragraphs built here, one of which holds the asked fact, with a
forced answer. Word granularity, filler removal, the default model.

Live (the default): both methods in the same process one after the other (coarse-to-fine first): the ablated
prompts scored (forwards; the unedited prompt apart), the seconds, the share of full leave one out's forwards,
whether the top five words (by value; coarse-to-fine: measured words only) are the same set and in the same
order, and the largest difference between a measured word's value and full leave one out's. The machine's load
average is printed before and after: on a shared CPU the seconds are noisy, the forwards are not.

--record: log p(target) with each removal set the search can ask for, computed once per case and kept in
records/coarse_to_fine/<case>.json: every word (full leave one word out), every paragraph and sentence, and
every set one of RULES asks for on that case (halves of sentences, ...), the shipped rule's and the former
rule's first. --replay: every rule of RULES run on the recorded values (no model): forwards, share, top five
against full leave one word out, forward batches; "not recorded" where the records lack a set the rule asks
for (the fix: --record). Replayed forwards equal live ones: the search sees the same values (float32 noise of
other batch shapes apart, ~1e-5 nats).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from sequence_salience import scoring  # noqa: E402
from sequence_salience.ablation import AblationConfig, segment_salience  # noqa: E402
from sequence_salience.ablation.engine import parent_units  # noqa: E402
from sequence_salience.ablation.prefix import PrefixScorer  # noqa: E402
from sequence_salience.methods import coarse_to_fine, leave_one_out  # noqa: E402
from sequence_salience.methods.base import SegmentProblem  # noqa: E402
from sequence_salience.salience import prepare_pair, tokenized_result  # noqa: E402

PARAGRAPHS = [
    "Harbourview is a small coastal town with a population of about four thousand people. Most residents work "
    "in fishing, tourism or at the regional hospital on the hill.",
    "The town library was renovated last spring. It now has a reading room facing the sea, a children's corner "
    "and twelve public computers that anyone may book for an hour.",
    "Every Saturday a farmers' market fills the square in front of the old customs house. Stalls sell cheese, "
    "smoked fish, apples from the valley and bread baked the same morning.",
    "The ferry to the island leaves from the north pier. In summer it runs every two hours; in winter only "
    "three times a day, and it does not run at all when the wind is strong.",
    "The maritime museum opens at 9:30 in the morning and closes at five. Entry is free for children under "
    "twelve, and the lighthouse exhibit on the top floor is the most visited room.",
    "Two schools serve the town: a primary school near the harbour and a secondary school on the ring road. "
    "Both have a rowing club that trains in the bay on weekday evenings.",
    "The old railway line was closed decades ago and turned into a cycling path. It follows the coast for "
    "eleven kilometres and passes three beaches and a nature reserve for seabirds.",
    "The town council meets on the first Monday of each month in the town hall. Its meetings are public, and "
    "minutes are posted on the notice board outside the post office.",
    "A festival of sea shanties takes place every August. Choirs come from neighbouring towns, and the "
    "evening concert on the beach usually ends with fireworks over the water.",
    "Question: at what time does the maritime museum open in the morning? Answer with the time only.",
]
LONG_TARGET = " The maritime museum opens at 9:30."
SHIPPED = {"few-shot": "few-shot", "chain-of-thought": "chain-of-thought", "constitutional": "constitutional"}
CASES = (*SHIPPED, "long")
RECORDS = Path(__file__).resolve().parent / "records" / "coarse_to_fine"
COARSE = ("paragraph", "sentence")  # coarse_to_fine.COARSER["word"]

# The rules replayed: (label, k, rule). The shipped one is coarse_to_fine.RULE with k = 5.
R = coarse_to_fine.Rule
RULES = [
    ("signed, sentences (the former rule)", 5, R(magnitude=False, split_above=0)),
    ("signed, halves above 6 words", 5, R(magnitude=False, split_above=6)),
    ("signed, halves above 8 words", 5, R(magnitude=False, split_above=8)),
    ("magnitude, sentences", 5, R(magnitude=True, split_above=0)),
    ("magnitude, halves above 4 words", 5, R(magnitude=True, split_above=4)),
    ("magnitude, halves above 6 words", 5, R(magnitude=True, split_above=6)),
    ("magnitude, halves above 8 words", 5, R(magnitude=True, split_above=8)),
    ("magnitude, sentences, batched", 5, R(magnitude=True, split_above=0, batch=True)),
    ("magnitude, sentences, k = 3", 3, R(magnitude=True, split_above=0)),
    ("magnitude, sentences, k = 8", 8, R(magnitude=True, split_above=0)),
]


def cases(lm, names):
    """(key, name, prompt, target) of each case asked for."""
    rows = datasets.shipped_rows()
    for key in names:
        if key == "long":
            yield key, "long notes + question", lm.format_prompt("\n\n".join(PARAGRAPHS)), LONG_TARGET
            continue
        row = next(r for r in rows if r["case"].startswith(SHIPPED[key]))  # the case study (rows come first)
        prompt = lm.format_prompt(row["prompt"], system=row.get("system") or None)
        target = row.get("target") or lm.generate(prompt, ss.GenerationConfig(max_new_tokens=32)).text
        yield key, row["case"], prompt, target


def top(values, measured=None, n=5):
    v = np.where(measured, values, -np.inf) if measured is not None else values
    return [int(i) for i in np.argsort(-v, kind="stable")[:n]]


def key_of(removed) -> str:
    return ",".join(str(int(s)) for s in sorted(removed))


# -- recorded values ----------------------------------------------------------------------------------------

class Missing(Exception):
    """A removal set the records lack (run --record for its case)."""


class Recorded:
    """log p(target | prompt without a set of words) by set, from records/coarse_to_fine/<case>.json; with a
    model (`live`), a set not recorded yet is scored and added."""

    def __init__(self, key: str, record: dict, live=None, folder: Path = RECORDS):
        self.key, self.record, self.live, self.folder = key, record, live, folder
        self.logp: dict[str, float] = record.setdefault("logp", {})

    def path(self) -> Path:
        return self.folder / f"{self.key}.json"

    @classmethod
    def load(cls, key: str, folder: Path = RECORDS) -> "Recorded":
        path = folder / f"{key}.json"
        if not path.exists():
            raise SystemExit(f"No record of {key!r} at {path}. Fix: run with --record --cases {key} first.")
        return cls(key, json.loads(path.read_text()), folder=folder)

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path().write_text(json.dumps(self.record, indent=0))

    def score(self, sets) -> np.ndarray:
        """<float64>[M] log p of each removal set (word positions)."""
        todo = list(dict.fromkeys(key_of(s) for s in sets if key_of(s) not in self.logp))
        if todo and self.live is None:
            raise Missing(f"{self.key}: {len(todo)} removal sets are not recorded (first: {todo[0]}). Fix: run "
                          f"with --record --cases {self.key} (a rule of RULES asks for them).")
        for i in range(0, len(todo), 16):
            part = todo[i:i + 16]
            scorer, editor = self.live
            for k, lp in zip(part, scorer([editor([int(s) for s in k.split(",")]) for k in part])):
                self.logp[k] = float(lp)
            self.save()
        return np.array([self.logp[key_of(s)] for s in sets], dtype=np.float64)

    def problem(self, frame=lambda *a: None) -> SegmentProblem:
        r = self.record
        return SegmentProblem(n_segments=len(r["words"]), edit=lambda removed: tuple(sorted(removed)),
                              score=self.score, original_logprob=r["original_logprob"], span_tokens=1,
                              parents=tuple(np.asarray(p, dtype=np.int64) for p in r["parents"]),
                              parent_granularities=COARSE, frame=frame)

    def full(self) -> np.ndarray:
        """<float64>[S] full leave one word out."""
        return self.record["original_logprob"] - self.score([(s,) for s in range(len(self.record["words"]))])


def start_record(lm, key: str, name: str, prompt, target: str, folder: Path = RECORDS):
    """(the case's Recorded, scoring live, with every paragraph and sentence scored; its SalienceResult; its word
    segments): word granularity, filler removal; values already in folder/<key>.json are kept."""
    pair = prepare_pair(lm, prompt, target)
    scorer = PrefixScorer(lm, list(pair.prompt.ids), list(pair.target_ids), (0, len(pair.target_ids)))
    result = tokenized_result(lm, prompt, target, scorer.token_logprobs)
    segs = scoring.prompt_segments(result, "word").matches_only()
    editor = scoring.PromptEditor(lm, prompt, result, segs, "filler", scoring.filler_id(lm, " "))
    parents = parent_units(result, segs, COARSE)
    path = folder / f"{key}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    rec = Recorded(key, {**old, "case": name, "prompt": str(prompt), "target": target,
                         "original_logprob": scorer.original_logprob, "parents": [p.tolist() for p in parents],
                         "words": [result.text[a:b] for a, b in segs.spans]}, live=(scorer, editor), folder=folder)
    units = [tuple(np.flatnonzero(p == u).tolist()) for p in parents for u in np.unique(p)]
    rec.score(units)
    return rec, result, segs


def record(args) -> None:
    lm = ss.load_model("default")
    print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)", flush=True)
    for key, name, prompt, target in cases(lm, args.cases):
        t = time.perf_counter()
        rec, _result, segs = start_record(lm, key, name, prompt, target)
        # The shipped rule and the former one first, then full leave one word out, then the other rules: a record
        # stopped part way still replays those.
        first = [r for r in RULES if (r[1], r[2]) == (5, coarse_to_fine.RULE)] + RULES[:1]
        for _label, k, rule in first:
            coarse_to_fine.search(rec.problem(), k, rule)
        rec.score([(s,) for s in range(len(segs))])
        for _label, k, rule in RULES:
            coarse_to_fine.search(rec.problem(), k, rule)
        rec.save()
        print(f"{name}: {len(rec.logp)} sets recorded, {time.perf_counter() - t:.0f} s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def known_threshold(rec: Recorded, full: np.ndarray, k: int, rule) -> int:
    """The forwards of `rule`'s search were the final threshold max(v_k, 0) known from the start (v_k: full leave
    one out's k-th value): it refines exactly the units above it, none refined early while the threshold was
    still lower. No search on these units and this stop rule scores fewer while keeping its promise."""
    threshold = max(float(np.sort(full)[::-1][k - 1]), 0.0)
    parents = tuple(np.asarray(p, dtype=np.int64) for p in rec.record["parents"])
    o = rec.record["original_logprob"]
    size = abs if rule.magnitude else (lambda v: v)
    count, todo = 0, coarse_to_fine.finer_units(coarse_to_fine.Unit(-1, tuple(range(len(full)))), parents,
                                                rule.split_above)
    while todo:
        count += len(todo)
        units = [u for u in todo if u.level < len(parents)]
        values = o - rec.score([u.members for u in units]) if units else []
        todo = [f for u, v in zip(units, values) if size(v) > threshold
                for f in coarse_to_fine.finer_units(u, parents, rule.split_above)]
    return count


def replay(args) -> None:
    recs = [Recorded.load(key) for key in args.cases]
    fulls = []
    for rec in recs:
        try:
            fulls.append(rec.full())
        except Missing:
            fulls.append(None)  # full leave one word out not recorded (yet): forwards only
    words = " | ".join(f"{rec.record['case'].split(' (')[0]} ({len(rec.record['words'])} words)" for rec in recs)
    print(f"| rule | {words} |")
    print("|---|" + "---|" * len(recs))
    for label, k, rule in RULES:
        cells = []
        for rec, full in zip(recs, fulls):
            batches = []
            try:
                out = coarse_to_fine.search(rec.problem(frame=lambda *a: batches.append(a)), k, rule)
            except Missing:
                cells.append("not recorded")
                continue
            n, got, S = len(out.logprobs), top(out.values, out.measured), len(rec.record["words"])
            agree = ("full leave one out not recorded" if full is None else "same top five" if got == top(full)
                     else "same set, other order" if set(got) == set(top(full))
                     else f"differs in {len(set(top(full)) - set(got))}")
            bound = ""
            if full is not None and not rule.batch:
                try:
                    bound = f", threshold known: {known_threshold(rec, full, k, rule)}"
                except Missing:
                    bound = ", threshold known: not recorded"
            cells.append(f"{n} ({100 * n / S:.0f} %), {agree}, {len(batches)} batches{bound}")
        shipped = " **(shipped)**" if (k, rule) == (5, coarse_to_fine.RULE) else ""
        print(f"| {label}{shipped} | " + " | ".join(cells) + " |")
    for rec, full in zip(recs, fulls):
        if full is not None:
            print(f"<!-- {rec.key}: full top five {[rec.record['words'][i] for i in top(full)]} "
                  f"{[round(float(full[i]), 3) for i in top(full)]} -->")


def live(args) -> None:
    print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)", flush=True)
    lm = ss.load_model("default")
    print(f"rule: {coarse_to_fine.RULE}")
    print("| case | prompt tokens | words | method | forwards | seconds | share of full LOO's forwards | measured words |"
          " top five same set / order | largest difference on measured words |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _key, name, prompt, target in cases(lm, args.cases):
        t = time.perf_counter()
        c2f = segment_salience(lm, prompt, target, coarse_to_fine.NAME, granularity="word",
                               config=AblationConfig(refine_top_k=args.k))
        t_c2f = time.perf_counter() - t
        t = time.perf_counter()
        full = segment_salience(lm, prompt, target, leave_one_out.NAME, granularity="word")
        t_full = time.perf_counter() - t
        m = c2f.measured_mask()
        same_set = set(top(c2f.values, m)) == set(top(full.values))
        same_order = top(c2f.values, m) == top(full.values)
        diff = float(np.abs(c2f.values[m] - full.values[m]).max())
        words = len(full.segments)
        tokens = c2f.result.n_prompt_tokens
        f_c2f, f_full = c2f.stats.rows - 1, full.stats.rows - 1
        print(f"| {name} | {tokens} | {words} | coarse-to-fine (k={args.k}) | {f_c2f} | {t_c2f:.1f} | "
              f"{100 * f_c2f / f_full:.0f} % ({100 * t_c2f / t_full:.0f} % of the seconds) | {int(m.sum())} | "
              f"{'yes' if same_set else 'no'} / {'yes' if same_order else 'no'} | {diff:.1e} |")
        print(f"| {name} | {tokens} | {words} | full leave one word out | {f_full} | {t_full:.1f} | 100 % | "
              f"{words} | | |", flush=True)
        texts = full.segment_texts()
        print(f"<!-- {name}: full top five {[texts[i] for i in top(full.values)]}, coarse-to-fine "
              f"{[texts[i] for i in top(c2f.values, m)]} -->", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", choices=CASES, default=None,
                   help="default: constitutional long (live), every case (--record, --replay)")
    p.add_argument("--k", type=int, default=AblationConfig().refine_top_k)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--record", action="store_true", help="score and keep the removal sets the rules need")
    mode.add_argument("--replay", action="store_true", help="run RULES on the recorded values, no model")
    args = p.parse_args()
    if args.cases is None:
        args.cases = list(CASES) if args.record or args.replay else ["constitutional", "long"]
    (record if args.record else replay if args.replay else live)(args)


if __name__ == "__main__":
    main()
