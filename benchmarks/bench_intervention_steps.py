"""The intervention Run in steps on the default model: time to the first answer vs. the whole run.

As the browser does it, through the real LIT wrapper (lit_app/wrappers/inside.py): the salience
module has generated and highlighted the greedy answer of "What is the capital of France?",
the inside module has traced the token " Paris"; then one intervention (the last layer's
largest sub-update switched off) runs while this script polls the job's status every
20 ms, like the module (which polls every 0.4 s). Printed per repeat and as medians:

* probabilities: the status first carries the before/after probabilities and ranks;
* first token: the first regenerated token is visible;
* whole run: the run's answer arrives (text and salience of the new answer included);

next to the baseline measured in the same run: `inside.intervene` as the Run computed it
before (both sides traced, generated and explained from scratch, nothing shown until the end).
The machine is shared: compare ratios, and note `uptime`.

    python benchmarks/bench_intervention_steps.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    import torch

    import sequence_salience as ss
    from sequence_salience import inside
    from lit_app.schema import fields
    from lit_app.model import shared_model
    from lit_app.wrappers import inside as lit_inside

    lm = ss.load_model("default")
    shared = shared_model.SharedLM(lm, disk_cache=False)
    lit = lit_inside.make_inside_models(shared, "default")
    trace_model, run_model = lit["_default_inside_trace"], lit["_default_inside_intervene"]
    ex = {"prompt": "What is the capital of France?"}
    chat = shared.format_prompt(ex)
    gen = shared.generate(chat)  # the salience module's generation
    shared.quick(chat, "", 0, None)  # ... and its first highlight (the whole-response span)
    toks = [gen.text[s:e] for s, e in gen.offsets]
    t = next((i for i, x in enumerate(toks) if x.strip() == "Paris"), len(toks) - 1)
    plain = trace_model.predict([{**ex, lit_inside.INSIDE_T: t}])[0][lit_inside.TRACE]  # the module's trace
    sub = plain["layers"][-1]["sub_updates"][0]
    ivs = [{"layer": sub["layer"], "index": sub["index"], "mode": "off"}]
    print(f"model: {lm.name}; {torch.get_num_threads()} torch threads; answer {len(gen.ids)} tokens {gen.text!r}; "
          f"token {t} ({toks[t]!r}); intervention L{sub['layer']}·v{sub['index']} off; "
          f"max_new_tokens {shared.generation_config.max_new_tokens}")
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} cores")

    request = {**ex, lit_inside.INSIDE_T: t, lit_inside.INTERVENTIONS: json.dumps(ivs)}
    config = inside.InterventionConfig(trace=lit_inside.TRACE_CONFIG, generation=shared.generation_config,
                                       salience_method=fields.GRAD_X_INPUT_METHOD)
    rows = []
    for r in range(args.repeats):
        marks: dict[str, float] = {}
        out: list = []
        start = time.perf_counter()
        worker = threading.Thread(target=lambda: out.append(run_model.predict([request])[0]))
        worker.start()
        while worker.is_alive():
            job = run_model.jobs.status()
            partial = (job or {}).get("partial") or {}
            now = time.perf_counter() - start
            if "trace" in partial.get("after", {}):
                marks.setdefault("probabilities", now)
            if "generation" in partial.get("after", {}):
                marks.setdefault("first token", now)
            time.sleep(0.02)
        worker.join()
        marks["whole run"] = time.perf_counter() - start
        answer = out[0][lit_inside.INTERVENTION]
        assert "cancelled" not in answer
        start = time.perf_counter()
        refs: list = []
        # On a worker thread, as the server runs it: here, with the cores oversubscribed, torch on the
        # main thread ran 5-7x slower than on a worker thread (OpenMP), which would flatter the steps.
        baseline = threading.Thread(target=lambda: refs.append(inside.intervene(lm, chat, ivs, gen, t, config)))
        baseline.start()
        baseline.join()
        marks["baseline intervene"] = time.perf_counter() - start
        ref = refs[0]
        assert ref.after.generation.text == answer["after"]["generation"]["text"]
        rows.append(marks)
        print(f"repeat {r + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in marks.items())
              + f"; steps {[(s['name'], s['seconds']) for s in answer['steps']]}")
    med = {k: statistics.median(m[k] for m in rows) for k in rows[0]}
    print("median: " + ", ".join(f"{k} {v:.2f} s" for k, v in med.items()))
    print(f"first answer / whole run: {med['probabilities'] / med['whole run']:.2f}; "
          f"first answer / baseline: {med['probabilities'] / med['baseline intervene']:.2f}; "
          f"whole run / baseline: {med['whole run'] / med['baseline intervene']:.2f}")
    print(f"regenerated: {answer['after']['generation']['text']!r}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
