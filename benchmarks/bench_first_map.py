"""When the first map is on screen at sentence granularity: the gradient's first highlight vs attention_verified
(issue 42 §5: "on the shipped rows, no later than the gradient's first highlight"), through the server's own code.

    .venv/bin/python benchmarks/bench_first_map.py [--repeats 3] [--rows 0 1 2 3] [--no_exact] [--with_matrices]
    .venv/bin/python benchmarks/bench_first_map.py --goal [--repeats 2] [--no_exact]
    .venv/bin/python benchmarks/bench_first_map.py --breakdown [--repeats 2] [--rows 0 3] [--with_matrices]
    .venv/bin/python benchmarks/bench_first_map.py --stages [--repeats 2] [--rows 0 3]

In process, the path the page takes (lit_app.model.shared_model.SharedLM and the salience wrapper, as the server
builds them; no HTTP, no browser), on the default model, for each shipped row (`datasets.shipped_rows()`; the
chat template as the app formats it; a row without a target explains its greedy response, generated once before
any timing: the page streams it before the first highlight either way):

* first highlight: the `detail="span"` request of the whole response (one forward + backward, grad_norm and
  grad_x_input; the payload the page receives), from a cold cache;
* attention_verified: then the sentence job the page starts next when the rule names it the first map (the page's
  per-token matrix job, which the first highlight starts, is cancelled first; --with_matrices leaves it running
  beside the first map's, as in the browser)
  (`SharedLM.segment_salience`, the job's own computation, blocking here): it takes the span's gradient from the
  first highlight's cached result (no backward of its own), one forward records the attention, then 6-12 forwards
  verify;
* leave_one_out: the exact map that confirms it, also after the first highlight, from a cold segment cache
  (--no_exact skips it): one forward per sentence the first map did not verify (it takes the verified sentences'
  exact values from the first map's result, salience_runs.exact_values_of); "its forwards" counts them.

The first map is on screen at first highlight + attention_verified (+ the page's next poll, at most
frontend/src/salience/page.ts POLL_MS = 0.7 s, not counted here). Repeats are interleaved row by row (the machine
is shared and noisy); each figure is the median over repeats. Prints a Markdown table; asserts nothing.

--breakdown (`breakdown`, issue 42: where the time between the first highlight and the first map goes): the first
map's job split into waiting for the model (the scheduler's acquire), the estimator, the verification forwards
(prefix.py's per-batch log: rows, positions, threads, seconds) and the rest; beside them, in the same repeat, one
forward of the unedited pair on one thread (what a job that does not take the highlight's recorded pass runs first).
From these: the first map on screen ÷ the first highlight now, its floor after the highlight with no waiting and no
estimator ((highlight + verification forwards) ÷ highlight), and what ordering the first map before the gradient
would give with the same verified sentences ((unedited forward + estimator + verification forwards) ÷ highlight).

--stages (`stages`, issue 42 session 37: each stage of the first map on screen ÷ the first highlight): the page's own
requests through the salience wrapper, in its order: the first highlight (`detail="span"`, which starts the page's
matrix job, left running as in the browser), then the first map's segment request (`detail="segments"`, the method
the rule names at sentence), repeated every 20 ms (the page polls every 0.7 s: here the server's side alone) until
its values come, then exact leave one out's the same way. Per stage, from the first highlight's start: its first
look (the first answer that holds `partial_segments`, the estimate; the first map's request waits up to
FIRST_LOOK_WAIT_S for it), its verified map (`segments`), the exact map ("confirmed"); each ÷ the first highlight.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sequence_salience as ss  # noqa: E402
from lit_app.data import datasets  # noqa: E402
from lit_app.model import shared_model  # noqa: E402
from lit_app.schema import inputs, method_registry  # noqa: E402
from lit_app.wrappers import salience  # noqa: E402
from sequence_salience.ablation import AblationConfig  # noqa: E402
from sequence_salience.methods import attention_verified, leave_one_out  # noqa: E402

GRANULARITY = "sentence"


def _segment_request(method: str, granularity: str = GRANULARITY) -> inputs.SegmentRequest:
    return inputs.SegmentRequest(method, granularity, None, AblationConfig().removal, None, 0)


def time_row(shared, wrapper, ex: dict, exact: bool, matrices: bool = False, granularity: str = GRANULARITY,
             keep: dict | None = None, page_wait: bool = False) -> dict:
    """One cold repeat of one row: seconds of the first highlight, attention_verified after it, leave_one_out
    (`keep`: also the segment results, under "first_map" and "exact"; `page_wait`, with `matrices`: the first map's
    job is asked for once the page's matrix job holds the model, as in the browser after its round trip)."""
    chat = shared.format_prompt(ex)
    target = ex.get("target", "")
    shared.forget_salience()
    t = time.perf_counter()
    wrapper.predict([{**ex, "detail": "span"}])
    out = {"first_highlight_s": time.perf_counter() - t}
    if not matrices:
        shared.jobs.cancel_all()  # the page's background matrices: not part of either figure
    elif page_wait:  # the page asks for the first map after a round trip: the matrix job holds the model by then
        from lit_app.model.scheduler import Priority  # pylint: disable=import-outside-toplevel

        deadline = time.perf_counter() + 1.0
        while shared.lock.holder_priority() != Priority.BACKGROUND and time.perf_counter() < deadline:
            time.sleep(0.005)
    t = time.perf_counter()
    seg = shared.segment_salience(chat, target, _segment_request(attention_verified.NAME, granularity))
    out["attention_verified_s"] = time.perf_counter() - t
    out["verified"] = int(seg.quality.get("verified", 0))
    out["segments"] = len(seg.segments)
    if exact:
        t = time.perf_counter()
        exact_seg = shared.segment_salience(chat, target, _segment_request(leave_one_out.NAME, granularity))
        out["leave_one_out_s"] = time.perf_counter() - t
        out["leave_one_out_forwards"] = int(exact_seg.stats.rows) - 1  # the ablated prompts it scored
    out["tokens"] = seg.n_tokens
    if keep is not None:
        keep["first_map"] = seg
        if exact:
            keep["exact"] = exact_seg
    shared.jobs.cancel_all()
    return out


class _Batches(logging.Handler):
    """sequence_salience.ablation.prefix's per-batch DEBUG lines: (rows, positions, threads, seconds)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.rows: list[tuple[int, int, int, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "batch:" in str(record.msg):
            _stage, rows, _start, positions, *_kind, threads, seconds = record.args
            self.rows.append((int(rows), int(positions), int(threads), float(seconds)))


@contextlib.contextmanager
def _timed(owner, name: str, into: dict, key):
    """owner.name timed into[key] (seconds, summed over calls; key: a name, or (args, kwargs) -> a name or None: not
    counted) inside the block; the original after."""
    original, own = getattr(owner, name), name in vars(owner)

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            k = key(args, kwargs) if callable(key) else key
            if k is not None:
                into[k] = into.get(k, 0.0) + time.perf_counter() - t

    setattr(owner, name, timed)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)  # an instance's attribute over its class's method: the method shows again


def unedited_forward_s(lm, seg) -> float:
    """Seconds of one forward of the unedited pair on one thread, the target's logits only (PrefixScorer's first
    forward when no recorded pass is taken)."""
    from sequence_salience.ablation.prefix import PrefixScorer  # pylint: disable=import-outside-toplevel
    from sequence_salience.threads import ThreadChooser  # pylint: disable=import-outside-toplevel

    result = seg.result
    ids = [int(i) for i in result.ids]
    P = result.n_prompt_tokens
    t = time.perf_counter()
    PrefixScorer(lm, ids[:P], ids[P:], (0, len(ids) - P), threads=ThreadChooser(most=1), reuse=False)
    return time.perf_counter() - t


def breakdown(shared, wrapper, lm, examples: dict, repeats: int, matrices: bool, pauses_ab: bool = False) -> None:
    """--breakdown (module docstring): per row, medians over `repeats` interleaved cold repeats. pauses_ab (with
    `matrices`, the page's wait for its round trip): each repeat once with the matrices' forward pausing at its layer
    boundaries for the first map's job (gradients.layer_pauses) and once without (before), alternated, a table each."""
    from sequence_salience.methods import gradients  # pylint: disable=import-outside-toplevel
    from lit_app.model.scheduler import Priority  # pylint: disable=import-outside-toplevel
    from sequence_salience.methods import attention_attribution  # pylint: disable=import-outside-toplevel

    def user_job(args, kwargs):  # the first map's job holds the model as a user job (salience_runs.segment_priority)
        level = args[0] if args else kwargs.get("priority", Priority.INTERACTIVE)
        return "wait" if Priority(level) == Priority.USER_JOB else None

    handler = _Batches()
    log = logging.getLogger("sequence_salience.ablation.prefix")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    arms = ("pauses in the forward", "no pauses in the forward (before)") if pauses_ab else ("",)
    pausing = gradients.layer_pauses
    runs: dict[str, dict[int, list[dict]]] = {arm: {i: [] for i in examples} for arm in arms}
    for rep in range(repeats):
        order = [(i, ex, arm) for n, (i, ex) in enumerate(examples.items())
                 for arm in (arms if (rep + n) % 2 == 0 else arms[::-1])]
        for i, ex, arm in order:
            gradients.layer_pauses = pausing if arm == arms[0] else lambda _model, _sizer: contextlib.nullcontext()
            parts: dict[str, float] = {}
            handler.rows.clear()
            load = os.getloadavg()[0]
            keep: dict = {}
            with _timed(shared.lock, "acquire", parts, user_job), \
                    _timed(attention_attribution, "compute", parts, "estimator"):
                r = time_row(shared, wrapper, ex, False, matrices, keep=keep, page_wait=pauses_ab)
            r["wait_s"] = parts.get("wait", 0.0)
            r["estimator_s"] = parts.get("estimator", 0.0)
            r["forwards"] = len(handler.rows)
            r["positions"] = sum(p for _, p, _, _ in handler.rows)
            r["threads"] = max((t for _, _, t, _ in handler.rows), default=0)
            r["verify_s"] = sum(s for _, _, _, s in handler.rows)
            r["unedited_s"] = unedited_forward_s(lm, keep["first_map"])
            r["load"] = load
            runs[arm][i].append(r)
            print(arm, i, rep, r, flush=True)
    gradients.layer_pauses = pausing
    log.removeHandler(handler)
    for arm in arms:
        print(f"\n{arm}")
        _breakdown_table(runs[arm])


def _breakdown_table(runs: dict[int, list[dict]]) -> None:
    print("| row | tokens | sentences | verified | positions verified (÷ tokens) | verification forwards | first highlight (s) "
          "| first map after it (s) | of which: waiting | estimator | verification forwards (s) | rest | unedited forward "
          "(s) | on screen ÷ highlight | floor after the highlight | first map before the gradient | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, rs in runs.items():
        med = {k: statistics.median(float(r[k]) for r in rs) for k in rs[0]}
        now = statistics.median((r["first_highlight_s"] + r["attention_verified_s"]) / r["first_highlight_s"] for r in rs)
        floor = statistics.median((r["first_highlight_s"] + r["verify_s"]) / r["first_highlight_s"] for r in rs)
        first = statistics.median((r["unedited_s"] + r["estimator_s"] + r["verify_s"]) / r["first_highlight_s"]
                                  for r in rs)
        rest = med["attention_verified_s"] - med["wait_s"] - med["estimator_s"] - med["verify_s"]
        print(f"| {i} | {int(med['tokens'])} | {int(med['segments'])} | {med['verified']:g} | {int(med['positions'])} "
              f"({med['positions'] / med['tokens']:.1f}) | {med['forwards']:g} | {med['first_highlight_s']:.2f} "
              f"| {med['attention_verified_s']:.2f} | {med['wait_s']:.2f} | {med['estimator_s']:.3f} "
              f"| {med['verify_s']:.2f} | {rest:.2f} | {med['unedited_s']:.2f} | {now:.2f}× | {floor:.2f}× | {first:.2f}× "
              f"| {min(r['load'] for r in rs):.1f}-{max(r['load'] for r in rs):.1f} |")


def goal(shared, wrapper, lm, repeats: int, exact: bool, tokens: int = 4000, paragraphs: int = 34) -> None:
    """The cost goal's prompt (issue 42: bench_attention_attribution.py `goal`, long_notes_prompt(0, 4000, 34),
    paragraphs) through the server's path (time_row: the first highlight records nothing over
    salience_runs.UNEDITED_MAX_TOKENS, so attention_verified runs the unedited forward itself) and the library's
    (compute_span_result(record=span_recorder), then segment_salience(result=): no unedited forward), alternated
    in one process; the confirming leave one out (server path, first repeat, `exact`) is the reference for the top
    three. The library's path runs with one torch thread (as `goal` --threads 1), the server's as the server chooses.
    Each path's first map is divided by its own first highlight (a forward + backward of the prompt: the
    server's with its layers recomputed, the library's recorded pass without)."""
    from sequence_salience.ablation import segment_salience, span_recorder  # pylint: disable=import-outside-toplevel
    from sequence_salience.attention import agreement  # pylint: disable=import-outside-toplevel
    from sequence_salience.attention.prompts import long_notes_prompt  # pylint: disable=import-outside-toplevel
    from lit_app.model import salience_runs  # pylint: disable=import-outside-toplevel

    item = long_notes_prompt(0, tokens, paragraphs, count=lambda text: len(lm.tokenize(text).ids))
    ex = {"prompt": item.user, "system": item.system, "target": item.target}
    chat = shared.format_prompt(ex)
    config = shared.segment_config(_segment_request(attention_verified.NAME, "paragraph"))
    print(f"UNEDITED_MAX_TOKENS {salience_runs.UNEDITED_MAX_TOKENS}; ablation config as the server's: {config}")
    rows, reference = [], None
    for rep in range(repeats):
        paths = ("server", "library") if rep % 2 == 0 else ("library", "server")
        for path in paths:
            if path == "server":
                keep: dict = {}
                r = time_row(shared, wrapper, ex, exact and reference is None, granularity="paragraph", keep=keep)
                seg = keep["first_map"]
                if "exact" in keep:
                    reference = keep["exact"].values
            else:
                shared.forget_salience()
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                t = time.perf_counter()
                highlight = ss.compute_span_result(lm, chat, item.target, methods=("grad_norm", "grad_x_input"),
                                                   record=span_recorder)
                r = {"first_highlight_s": time.perf_counter() - t}
                t = time.perf_counter()
                seg = segment_salience(lm, chat, item.target, attention_verified.NAME, granularity="paragraph",
                                       config=config, result=highlight)
                r["attention_verified_s"] = time.perf_counter() - t
                torch.set_num_threads(threads)
                r["verified"], r["tokens"] = int(seg.quality.get("verified", 0)), seg.n_tokens
            start = seg.text.index(item.target.strip())
            r["fact"] = next(k for k, (a, b) in enumerate(seg.segments) if a <= start < b)
            r["segments"] = len(seg.segments)
            r["values"] = seg.values
            r["rows"] = int(seg.stats.rows)
            rows.append((rep + 1, path, r))
            order = agreement.order(seg.values)
            print(path, rep + 1, {k: v for k, v in r.items() if k != "values"}, "fact's rank", order.index(r["fact"]) + 1,
                  "top three", order[:3], "values", [round(float(v), 3) for v in seg.values], flush=True)
    if reference is not None:
        print(f"leave one out (the confirming job): the fact's paragraph ranked "
              f"{agreement.order(reference).index(rows[0][2]['fact']) + 1}, top three {agreement.order(reference)[:3]}")
    print("| repeat | path | tokens | paragraphs | first highlight (s) | attention_verified after it (s) | ÷ first highlight "
          "| verified | rows | fact's rank | top three | shared of leave one out's top 3 | leave one out after it (s) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for rep, path, r in rows:
        order = agreement.order(r["values"])
        shared3 = "–" if reference is None else f"{round(3 * agreement.top_overlap(r['values'], reference, 3))}/3"
        loo = f"{r['leave_one_out_s']:.1f}" if "leave_one_out_s" in r else "–"
        print(f"| {rep} | {path} | {r['tokens']} | {r['segments']} | {r['first_highlight_s']:.1f} "
              f"| {r['attention_verified_s']:.1f} | {r['attention_verified_s'] / r['first_highlight_s']:.2f} "
              f"| {r['verified']} | {r['rows']} | {order.index(r['fact']) + 1} | {order[:3]} | {shared3} | {loo} |")


def confirm_saving(shared, wrapper, examples: dict, repeats: int) -> None:
    """The confirming leave one out after a first map that verified every sentence (docs/benchmarks.md "Session 36
    (h2)"): the library's call the server's job makes (`segment_salience(result=the highlight's, known=the first
    map)`), with its check value from the highlight's result (now: no model pass) and as before (engine.all_known
    patched to False: one unedited forward), alternated in one process, after time_row's highlight and first map."""
    from unittest import mock  # pylint: disable=import-outside-toplevel

    from sequence_salience.ablation import engine, segment_salience  # pylint: disable=import-outside-toplevel

    print("| row | sentences | verified | before: leave one out (s) | its positions run | now (s) | positions run "
          "| now ÷ before | max |values now - before| |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, ex in examples.items():
        keep: dict = {}
        time_row(shared, wrapper, ex, False, keep=keep)
        first = keep["first_map"]
        chat = shared.format_prompt(ex)
        explained = shared.explained(chat, ex.get("target", ""))
        config = shared.segment_config(_segment_request(leave_one_out.NAME))
        ratios, times, out = [], {"now": [], "before": []}, {}
        for rep in range(repeats):
            for case in (("now", "before") if rep % 2 == 0 else ("before", "now")):
                before = mock.patch.object(engine, "all_known", return_value=False)
                with before if case == "before" else contextlib.nullcontext():
                    t = time.perf_counter()
                    out[case] = segment_salience(shared.lm, chat, explained, leave_one_out.NAME, granularity=GRANULARITY,
                                                 config=config, result=first.result, known=first)
                    times[case].append(time.perf_counter() - t)
            ratios.append(times["now"][-1] / times["before"][-1])
        diff = float(abs(out["now"].values - out["before"].values).max())
        print(f"| {i} | {len(first.segments)} | {int(first.measured_mask().sum())} "
              f"| {statistics.median(times['before']):.3f} | {out['before'].stats.computed} "
              f"| {statistics.median(times['now']):.4f} | {out['now'].stats.computed} "
              f"| {statistics.median(ratios):.4f} | {diff:.1e} |", flush=True)


def stages(shared, wrapper, examples: dict, repeats: int, rows: list[dict]) -> None:
    """--stages (module docstring): medians over `repeats` cold repeats, interleaved row by row."""
    from lit_app.schema import fields  # pylint: disable=import-outside-toplevel

    first = method_registry.FIRST_MAP_METHOD[GRANULARITY]
    poll_s = 0.02

    def until_values(ex: dict, method: str, start: float, out: dict, look: str | None) -> None:
        ask = {**ex, fields.DETAIL: method_registry.SEGMENT_DETAIL, fields.SEGMENT_METHOD: method,
               fields.GRANULARITY: GRANULARITY}
        while True:
            answer = wrapper.predict([ask])[0][fields.SALIENCE]
            now = time.perf_counter() - start
            if look is not None and look not in out and fields.PARTIAL_SEGMENTS in answer:
                out[look] = now
                out["look_verified"] = int(answer[fields.PARTIAL_SEGMENTS]["quality"].get("verified", -1))
            if fields.SEGMENTS in answer:
                out[method] = now
                return
            if answer["detail"]["state"] in ("error", "cancelled"):
                raise RuntimeError(f"{method}: {answer['detail']}")
            time.sleep(poll_s)

    runs: dict[int, list[dict]] = {i: [] for i in examples}
    for rep in range(repeats):
        for i, ex in examples.items():
            shared.forget_salience()
            load = os.getloadavg()[0]
            t = time.perf_counter()
            wrapper.predict([{**ex, "detail": "span"}])  # the first highlight; starts the page's matrix job
            out: dict = {"highlight": time.perf_counter() - t, "load": load}
            until_values(ex, first, t, out, "look")
            until_values(ex, leave_one_out.NAME, t, out, None)
            shared.jobs.cancel_all()
            runs[i].append(out)
            print(i, rep, out, flush=True)
    print(f"first map at {GRANULARITY}: {first}; seconds from the first highlight's start; ÷: over the first highlight")
    print("| row | case | first highlight (s) | first look: estimate (s) | ÷ | verified map (s) | ÷ | confirmed (s) | ÷ "
          "| verified in the first look | load |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, rs in runs.items():
        med = {k: statistics.median(float(r[k]) for r in rs) for k in ("highlight", first, leave_one_out.NAME)}
        looks = [r["look"] for r in rs if "look" in r]
        ratio = lambda key: statistics.median(r[key] / r["highlight"] for r in rs if key in r)  # noqa: E731
        look = f"{statistics.median(looks):.2f} | {ratio('look'):.2f}×" if looks else "– | –"
        cells = [i, rows[i]["case"], f"{med['highlight']:.2f}", look]
        cells += [f"{med[key]:.2f} | {ratio(key):.2f}×" for key in (first, leave_one_out.NAME)]
        cells += [sorted({r.get("look_verified", "–") for r in rs}, key=str),
                  f"{min(r['load'] for r in rs):.1f}-{max(r['load'] for r in rs):.1f}"]
        print("| " + " | ".join(map(str, cells)) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows", nargs="*", type=int, default=None, help="indices into shipped_rows() (default: all)")
    p.add_argument("--no_exact", action="store_true", help="leave out leave_one_out's time")
    p.add_argument("--with_matrices", action="store_true",
                   help="leave the page's matrix job running beside the first map's job (the browser's case)")
    modes = {  # each runs its function instead of the rows' table (the first one given); the help names it
        "goal": "the cost goal's 4,000-token prompt at paragraph granularity instead of the shipped rows: the server's "
                "path and the library's, alternated (`goal`)",
        "confirm_saving": "the confirming leave one out after the first map, with and without its check value from the "
                          "highlight's result, alternated (`confirm_saving`)",
        "breakdown": "where the first map's time goes after the first highlight, per row (`breakdown`)",
        "stages": "each stage of the first map on screen (its first look, the verified map, the confirmation) ÷ the "
                  "first highlight, through the page's requests (`stages`)",
    }
    for mode, text in modes.items():
        p.add_argument(f"--{mode}", action="store_true", help=text)
    p.add_argument("--goal_tokens", type=int, default=4000, help="--goal's prompt length (a smaller one to try it)")
    p.add_argument("--goal_paragraphs", type=int, default=34)
    p.add_argument("--pauses_ab", action="store_true",
                   help="with --breakdown --with_matrices: the first map asked for once the matrix job holds the model, "
                        "its forward pausing for it or not (before), alternated")
    args = p.parse_args()

    lm = ss.load_model("default")
    ablation = AblationConfig(**method_registry.server_ablation_settings({}))
    shared = shared_model.SharedLM(lm, disk_cache=False, ablation_config=ablation)
    wrapper = salience.SalienceModel(shared)
    if args.goal:
        try:
            goal(shared, wrapper, lm, args.repeats, not args.no_exact, args.goal_tokens, args.goal_paragraphs)
        finally:
            shared.jobs.cancel_all()
        return
    rows = datasets.shipped_rows()
    picked = args.rows if args.rows is not None else list(range(len(rows)))
    examples = {}
    for i in picked:
        ex = {k: rows[i][k] for k in ("prompt", "system", "target") if k in rows[i]}
        shared.explained(shared.format_prompt(ex), ex.get("target", ""))  # generation before any timing
        examples[i] = ex
    if args.confirm_saving:
        try:
            confirm_saving(shared, wrapper, examples, args.repeats)
        finally:
            shared.jobs.cancel_all()
        return
    if args.stages:
        try:
            stages(shared, wrapper, examples, args.repeats, rows)
        finally:
            shared.jobs.cancel_all()
        return
    if args.breakdown:
        try:
            breakdown(shared, wrapper, lm, examples, args.repeats, args.with_matrices, args.pauses_ab)
        finally:
            shared.jobs.cancel_all()
        return
    runs: dict[int, list[dict]] = {i: [] for i in picked}
    try:
        for _ in range(args.repeats):
            for i in picked:
                runs[i].append(time_row(shared, wrapper, examples[i], not args.no_exact, args.with_matrices))
    finally:
        shared.jobs.cancel_all()

    print(f"first map: {method_registry.FIRST_MAP_METHOD}")
    print("| row | case | tokens | sentences | verified | first highlight (s) | attention_verified after it (s) "
          "| first map on screen (s) | ÷ first highlight | leave one out after it (s) | its forwards |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i in picked:
        med = {k: statistics.median(r[k] for r in runs[i]) for k in runs[i][0]}
        shown = med["first_highlight_s"] + med["attention_verified_s"]
        loo = f"{med['leave_one_out_s']:.2f}" if "leave_one_out_s" in med else "–"
        forwards = f"{med['leave_one_out_forwards']:g}" if "leave_one_out_forwards" in med else "–"
        print(f"| {i} | {rows[i]['case']} | {int(med['tokens'])} | {int(med['segments'])} | {med['verified']:g} "
              f"| {med['first_highlight_s']:.2f} | {med['attention_verified_s']:.2f} | {shown:.2f} "
              f"| {shown / med['first_highlight_s']:.1f}× | {loo} | {forwards} |")
    print("raw:", {i: runs[i] for i in picked})


if __name__ == "__main__":
    main()
