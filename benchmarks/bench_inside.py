"""Inside the model on the default model: trace, value index, interventions.

Prints, for the chat prompt "What is the capital of France?" and the model's
greedy answer, the time to trace one position (one forward pass, no backward,
plus the logit-lens read-outs) next to a plain forward pass over the same
tokens; the cold build time, file size and load time of the value index (built
into a temporary cache directory, so the user's cache is untouched); a search;
and the time of `intervene` (trace + greedy regeneration + salience, before and
under one `off` intervention) next to one plain greedy generation. Machines
here are noisy: compare ratios measured in the same run.

    python benchmarks/bench_inside.py [--repeats 3] [--skip_index]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip_index", action="store_true", help="Skip the (minutes-long) cold index build.")
    args = p.parse_args()

    import torch

    import sequence_salience as ss
    from sequence_salience import inside
    from sequence_salience.inside.trace import sequence_ids

    lm = ss.load_model("default")
    chat = lm.format_prompt("What is the capital of France?")
    gen = lm.generate(chat, ss.GenerationConfig(max_new_tokens=32))
    toks = [gen.text[s:e] for s, e in gen.offsets]
    t = next((i for i, x in enumerate(toks) if x.strip() == "Paris"), len(toks) - 1)
    ids, n_prompt = sequence_ids(lm, chat, gen)
    print(f"model: {lm.name}; {torch.get_num_threads()} torch threads; prompt {n_prompt} tokens, "
          f"response {len(gen.ids)} tokens {gen.text!r}; tracing token {t} ({toks[t]!r})")
    rows = []

    x = torch.tensor([ids[: n_prompt + t]])
    inside.trace(lm, chat, gen, t)  # warm-up

    def forward():
        with torch.no_grad():
            lm.model(input_ids=x, use_cache=False)

    plain = _median_time(forward, args.repeats)
    tr_time = _median_time(lambda: inside.trace(lm, chat, gen, t), args.repeats)
    tr = inside.trace(lm, chat, gen, t)
    rows.append(("plain forward pass over the same tokens", f"{plain:.3f} s", ""))
    rows.append(("trace of one position (forward + logit lens + sub-updates)", f"{tr_time:.3f} s",
                 f"{tr_time / plain:.2f}x the forward"))
    print("rank of the target after each layer:", tr.ranks())

    if not args.skip_index:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["SEQUENCE_SALIENCE_CACHE"] = tmp
            start = time.perf_counter()
            key = inside.model_identity(lm)
            ident = time.perf_counter() - start
            start = time.perf_counter()
            index = inside.build_value_index(lm)
            build = time.perf_counter() - start
            path = inside.index_path(key)
            size = path.stat().st_size
            start = time.perf_counter()
            loaded = inside.load_value_index(path, key)
            load = time.perf_counter() - start
            search = _median_time(lambda: inside.search_values(lm, loaded, "Paris"), args.repeats)
            hits = inside.search_values(lm, loaded, "Paris")
            del os.environ["SEQUENCE_SALIENCE_CACHE"]
        n_values = index.top_ids.shape[0] * index.top_ids.shape[1]
        rows.append(("model identity (hash of config, unembedding, output projections)", f"{ident:.2f} s", ""))
        rows.append((f"value index, cold build ({n_values:,} values, top {index.top_k} tokens each)",
                     f"{build:.1f} s", f"{build / index.num_layers:.2f} s per layer"))
        rows.append(("value index file", f"{size / 1e6:.1f} MB", f"{index.nbytes / 1e6:.1f} MB in memory"))
        rows.append(("value index, load from disk", f"{load:.3f} s", ""))
        rows.append(("search 'Paris' (all layers)", f"{search * 1000:.1f} ms", f"{hits.total} matches"))

    plain_gen = _median_time(lambda: lm.generate(chat, ss.GenerationConfig(max_new_tokens=32)), 1)
    top = max((s for layer in tr.layers for s in layer.sub_updates), key=lambda s: s.score)
    config = inside.InterventionConfig(generation=ss.GenerationConfig(max_new_tokens=32))
    start = time.perf_counter()
    result = inside.intervene(lm, chat, [(top.layer, top.index, "off")], gen, t, config)
    iv = time.perf_counter() - start
    rows.append(("plain greedy generation (32 new tokens max)", f"{plain_gen:.2f} s", ""))
    rows.append(("intervene: trace + regenerate + span salience, before and after", f"{iv:.2f} s",
                 f"after side {result.after.seconds + result.after.trace.seconds:.2f} s"))
    print(f"intervention off L{top.layer} v{top.index}: p(target) {result.before.trace.output.target_prob:.3f} -> "
          f"{result.after.trace.output.target_prob:.3f}; response {result.before.generation.text!r} -> "
          f"{result.after.generation.text!r}")

    print("\n| measurement | value | note |\n|---|---:|---|")
    for name, value, note in rows:
        print(f"| {name} | {value} | {note} |")


if __name__ == "__main__":
    main()
