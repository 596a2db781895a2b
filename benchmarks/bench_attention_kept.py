"""The long prompt's first highlight with each layer's attention kept for the backward, against the plain recomputation.

    .venv/bin/python benchmarks/bench_attention_kept.py [--words 2500] [--repeats 1] [--threads 1]

The first highlight's pass as the server runs it (lit_app/model/salience_runs.py `quick`: `compute_span_result`,
grad_norm + grad_x_input, the whole target, `record_short`) on tests/e2e/test_progressive.py's 4,000-token prompt
(numbered notes, `--words` words; 2,500 make ~4,070 tokens with the test's target). "kept": the library as it is
(methods/gradients.py `KEPT_IN_RECOMPUTATION`: the backward's run of each layer takes the attention kernel's output
from the forward); "plain": that tuple emptied, so the backward runs each layer's forward again whole (as before
session 42). Each run is a fresh process (its peak resident memory is its own), in alternating order, each starting
with the other's order on the next repeat; the parent prints one line per run (CPU seconds of the pass, the peak
RSS's growth over the pass) and whether both variants gave the same values, bit for bit. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.e2e.test_progressive import long_prompt  # noqa: E402  (the 4,000-token test's own prompt)


TARGET = " " + " ".join(["The library opens at nine on day three, two hours before the market closes."] * 4)


def child(variant: str, words: int, threads: int) -> None:
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from lit_app.model.salience_runs import record_short  # pylint: disable=import-outside-toplevel
    from sequence_salience.methods import gradients  # pylint: disable=import-outside-toplevel

    if variant == "plain":
        gradients.KEPT_IN_RECOMPUTATION = ()
    lm = ss.load_model("default")
    chat = lm.format_prompt(long_prompt(words))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu = time.process_time()
    result = ss.compute_span_result(lm, chat, TARGET, record=record_short)
    cpu = time.process_time() - cpu
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    values = {m: result.span_salience(m, 0, result.num_targets).tolist() for m in ("grad_norm", "grad_x_input")}
    print(json.dumps({"variant": variant, "tokens": len(result.ids), "cpu_s": round(cpu, 1),
                      "peak_rss_growth_mb": round((rss1 - rss0) / 1024), "values": values}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--words", type=int, default=2500)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", choices=["kept", "plain"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.words, args.threads)
        return
    values = {}
    for r in range(args.repeats):
        for variant in (("plain", "kept") if r % 2 == 0 else ("kept", "plain")):
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--words", str(args.words),
                                  "--threads", str(args.threads)], check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            values[variant] = row.pop("values")
            print(json.dumps(row), flush=True)
    print(f"same values, bit for bit: {values['kept'] == values['plain']}")


if __name__ == "__main__":
    main()
