"""`sequence-salience explain` for one prompt, and `show` for a saved result: both render one
result (terminal, HTML, heatmap); explain_one is the explain step the batch shares.

Segment methods (leave_one_out, ablation_surrogate) run beside the token methods: their values
(one per segment of --granularity, sequence_salience.ablation) join the result as the span
salience of their method (display/segments.py), and their JSON (SegmentSalience.to_json(): values,
fit, cost) is saved in the file's meta under SEGMENTS_KEY, from which `show` reads their facts."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from sequence_salience.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    ablation_config,
    explain_default,
    console,
    err,
    info,
    load_model,
    reading_saved,
    read_prompt_file,
    run_settings,
    salience_config,
    segment_methods,
)
from sequence_salience.files import atomic_write_text
from sequence_salience.methods.base import unmeasured_origin

SEGMENTS_KEY = "segment_salience"  # meta key of the segment methods' JSON in a saved result


def explain_one(lm, prompt: str, system: str | None, target: str | None, chat: bool | None, methods, config,
                max_new_tokens: int, progress=None, span: tuple[int, int] | None = None, per_token: bool = False,
                timings: dict | None = None, segments=None):
    """Formats, generates (when target is None) and explains one prompt; returns (result, generated?, segment values).

    per_token=False (the default) computes only the salience of the target span (`span`, or the
    whole response) with compute_span_result: one forward + backward for the gradient methods.
    The result has `spans` and no `matrices`. per_token=True computes the per-token matrices with
    compute_salience (one backward per target token); every span renders from them.
    config: the SalienceConfig (IG steps, SmoothGrad samples).
    segments: (granularity, pattern, AblationConfig) of the segment methods among `methods`; each
      runs ablation.segment_salience on the same pair and span, and its values join the result's
      spans (display/segments.py). The third item returned lists their SegmentSalience.
    timings: optional dict that receives the seconds spent in "generate" and "salience".
    """
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import ablation  # pylint: disable=import-outside-toplevel
    from sequence_salience.display.segments import with_segment_values  # pylint: disable=import-outside-toplevel

    chat_prompt = lm.format_prompt(prompt, system=system or None, chat=chat)
    explained: Any = target
    timings = {} if timings is None else timings
    start = time.perf_counter()
    if target is None or target == "":
        explained = lm.generate(chat_prompt, ss.GenerationConfig(max_new_tokens=max_new_tokens))
        timings["generate"] = time.perf_counter() - start
        if not explained.ids:
            raise ss.SalienceError("The model generated an empty response (it ended its turn at once). "
                                   "Fix: give a --target to explain, or change the prompt.")
    by_segments = segment_methods(methods)
    token_methods = [m for m in methods if m not in by_segments]
    t0, t1 = span if span is not None else (0, None)
    start = time.perf_counter()
    result = None
    if not token_methods:
        pass  # the first segment method tokenizes the pair (no extra model pass)
    elif not per_token:
        result = ss.compute_span_result(lm, chat_prompt, explained, methods=token_methods, t0=t0, t1=t1,
                                        config=config, progress=progress)
    else:
        result = ss.compute_salience(lm, chat_prompt, explained, methods=token_methods, config=config,
                                     progress=progress)
        missing = [m for m in token_methods if not result.has_span(m, t0, t1)]
        if missing:  # grad_norm when the result is too large to keep its Gram tensor: one more backward
            result = result.merged(ss.compute_span_result(lm, chat_prompt, explained, methods=missing, t0=t0, t1=t1,
                                                          config=config))
    values = []
    if by_segments:
        granularity, pattern, ablation_cfg = segments
        for m in by_segments:
            values.append(ablation.segment_salience(lm, chat_prompt, explained, m, granularity=granularity,
                                                    pattern=pattern, span=span, config=ablation_cfg, result=result,
                                                    progress=progress))
            result = values[-1].result if result is None else result
        result = with_segment_values(result, values)
    timings["salience"] = time.perf_counter() - start
    return result, not isinstance(explained, str), values


def check_segment_flags(args, methods) -> None:
    """UsageError when a segment method is asked for with an output it cannot give."""
    by_segments = segment_methods(methods)
    if not by_segments:
        return
    names = ", ".join(by_segments)
    if needs_matrices(args):
        flag = "--per-token" if getattr(args, "per_token", False) else "--heatmap"
        raise UsageError(
            f"{flag} needs per-token matrices, and {names} is a segment method (one value per {args.granularity} "
            f"segment, from ablations; no value per response token). Fix: drop {flag}, or run it with a token "
            f"method only (e.g. --method {explain_default()} {flag}).")


def segment_summary(values) -> list[str]:
    """One line per segment method: its segments, forward rows, seconds are the caller's."""
    return [f"{v.method}: {len(v.values)} {v.granularity} segments, {v.stats.rows} forward rows "
            f"(the cached prefix saved {100 * v.stats.saved:.0f} % of their tokens){_refined(v)}" for v in values]


def _refined(v) -> str:
    """For coarse_to_fine and attention_verified: how many segments were measured, where the others come from."""
    measured = v.measured_mask()
    if measured.all():
        return ""
    return (f"; {int(measured.sum())} of {len(measured)} {v.granularity}s measured, the others "
            f"{unmeasured_origin(v.coarse_granularity)}")


def needs_matrices(args) -> bool:
    """Whether an output asked for needs the per-token matrices (--per-token, --heatmap)."""
    return bool(getattr(args, "per_token", False) or getattr(args, "heatmap", None))


def _span_label(result, span: tuple[int, int] | None) -> str:
    t0, t1 = span if span is not None else (0, result.num_targets)
    if (t0, t1) == (0, result.num_targets):
        return f"the whole response ({result.num_targets} tokens)"
    return f"response tokens {t0}:{t1} (of {result.num_targets})"


def check_renderable(result, span: tuple[int, int] | None, source: str) -> None:
    """UsageError when a span-only result (no per-token matrices) cannot show `span`."""
    if result.matrices:
        return
    t0, t1 = span if span is not None else (0, result.num_targets)
    if (t0, t1) in result.spans:
        return
    have = ", ".join(f"--span {a}:{b}" for a, b in result.spans) or "none"
    raise UsageError(
        f"{source} holds no per-token matrices (it was explained without --per-token), only the salience of "
        f"{have}; it cannot show tokens {t0}:{t1}. Fix: show the span it holds, or rerun "
        f"`sequence-salience explain ... --per-token` (or with --span {t0}:{t1})."
    )


def _write_heatmap(result, path: str, method, granularity: str, span, pattern, source: str) -> None:
    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    if not result.matrices:
        raise UsageError(f"--heatmap needs the per-token matrices; {source} was explained without --per-token. "
                         "Fix: rerun `sequence-salience explain ... --per-token --heatmap PATH`.")
    fig = display.heatmap(result, method, granularity, span, pattern=pattern)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fig.savefig(path, dpi=120)
    info(f"Wrote {path}")


def _write_share(result, args, method, span, model: str, segments, ablation, faithfulness=None) -> None:
    """--share: the standalone page of this view (display/share.py), with the faithfulness test when run.
    ablation: the segment methods' AblationConfig (the notebook cell measures a segment method with it)."""
    from sequence_salience.display import share  # pylint: disable=import-outside-toplevel

    share.write_share(result, args.share, method, args.granularity, span, model=model, pattern=args.pattern,
                      top=args.top, segments=segments, faithfulness=faithfulness, ablation=ablation)
    info(f"Wrote {args.share}" + ("" if result.matrices else " (no answer x prompt matrix: explain with --per-token)"))


def explain_single(args, methods, span) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    if args.out is not None or args.force:
        raise UsageError("--out and --force go with --batch. Fix: use --json/--html PATH for one prompt.")
    if args.html == "":
        raise UsageError("--html needs a PATH for one prompt (e.g. --html salience.html).")
    if args.faithfulness and not args.share:
        raise UsageError("--faithfulness puts the test's table on the shared page. Fix: add --share PATH (or run "
                         "`sequence-salience evaluate` for the test alone).")
    per_token = needs_matrices(args)
    prompt = args.prompt if args.prompt is not None else read_prompt_file(args.prompt_file)
    if not prompt.strip():
        raise UsageError("--prompt is empty. Fix: give the prompt text.")
    lm = load_model(args)
    timings: dict[str, float] = {}

    def progress(method, done, total):
        print(f"\r  {method}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    try:
        info("Generating ..." if args.target is None else "Explaining the given target ...")
        result, generated, values = explain_one(
            lm, prompt, args.system, args.target, False if args.raw else None, methods, salience_config(args),
            args.max_new_tokens, progress, span=span, per_token=per_token, timings=timings,
            segments=(args.granularity, args.pattern, ablation_config(args)))
    except ss.SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    took = f"in {timings['salience']:.1f} s" + (f" (generation: {timings['generate']:.1f} s)" if generated else "")
    if per_token:
        info(f"Explained {result.num_targets} response tokens one by one (per-token matrices) {took}.")
    elif len(values) == len(methods):
        info(f"Measured {_span_label(result, span)} by removing prompt segments {took}.")
    else:
        info(f"Explained {_span_label(result, span)} directly {took}; "
              "no per-token matrices (--per-token computes them).")
    for line in segment_summary(values):
        info("  " + line)
    meta = {"input": {"prompt": prompt, "system": args.system or "", "target": args.target or ""},
            "settings": run_settings(args, methods), "generated": generated, "matrices": per_token}
    if values:
        meta[SEGMENTS_KEY] = [v.to_json() for v in values]
    if args.json:
        display.to_json(result, args.json, meta)
        info(f"Wrote {args.json}" + ("" if per_token else " (this span only; no per-token matrices)"))
    try:
        view = display.SalienceView(result, methods[0], args.granularity, span, pattern=args.pattern, top=args.top,
                                    segments=values)
        if args.heatmap:
            _write_heatmap(result, args.heatmap, methods[0], args.granularity, span, args.pattern, "this result")
    except ss.SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    if args.html:
        atomic_write_text(args.html, view.html())
        info(f"Wrote {args.html}")
    if args.share:
        report = _faithfulness(lm, result, methods, span, args) if args.faithfulness else None
        _write_share(result, args, methods[0], span, args.model, values, ablation_config(args), report)
    if not args.quiet:
        console().print(view)
    return EXIT_OK


def _faithfulness(lm, result, methods, span, args):
    """--faithfulness: the deletion / insertion curves of `methods` on the result's own prompt and answer tokens
    and span (explain.faithfulness_curves), at the view's segmentation, removal and --steps."""
    from sequence_salience import explain  # pylint: disable=import-outside-toplevel
    from sequence_salience.display.share import explained_pair  # pylint: disable=import-outside-toplevel

    prompt, answer = explained_pair(result)
    config = explain.FaithfulnessConfig(granularity=args.granularity, pattern=args.pattern, steps=args.steps,
                                        removal=args.removal)
    info(f"Testing faithfulness ({len(methods)} method(s), {args.steps} steps per curve) ...")
    return explain.faithfulness_curves(lm, explain.CurvesRequest(
        prompt, answer, tuple(methods), span=span, config=config, salience_config=salience_config(args),
        result=result, ablation_config=ablation_config(args)))


def saved_segments(meta) -> list[dict]:
    """The segment methods' JSON saved beside a result (SEGMENTS_KEY), as display takes it."""
    saved = meta.get(SEGMENTS_KEY) if isinstance(meta, dict) else None
    return [dict(s) for s in saved] if isinstance(saved, (list, tuple)) else []


def _saved_model(meta) -> str:
    """The model a saved result was explained with (its settings), as load_model takes it."""
    model = ((meta.get("settings") or {}).get("model")) if isinstance(meta, dict) else None
    if not isinstance(model, str) or not model:
        raise UsageError("--share needs the model's name for its notebook cell, and this file does not say it "
                         "(written by result.to_json without meta). Fix: rerun `sequence-salience explain ... "
                         "--json PATH` or write the page with display.share.write_share(result, path, model=...).")
    return model


def _saved_ablation(meta):
    """The segment methods' AblationConfig a saved result was explained with (its settings: the removal and the
    methods' flagged settings, run_settings), for the shared page's notebook cell."""
    import dataclasses  # pylint: disable=import-outside-toplevel

    from sequence_salience.methods import AblationConfig  # pylint: disable=import-outside-toplevel

    settings = (meta.get("settings") or {}) if isinstance(meta, dict) else {}
    removal = (settings.get("segments") or {}).get("removal") or AblationConfig.removal
    own = {f.name: settings[f.name] for f in dataclasses.fields(AblationConfig) if f.name in settings}
    return AblationConfig(**{**own, "removal": removal})


def show(args, span) -> int:
    from sequence_salience import SalienceError, display  # pylint: disable=import-outside-toplevel

    try:
        with reading_saved(args.path):
            result, meta = display.load(args.path, with_meta=True)
            saved_methods = ((meta.get("settings") or {}).get("methods") or (None,)) if isinstance(meta, dict) else (None,)
            methods = [m.strip() for m in args.method.split(",")] if args.method else [saved_methods[0]]
            if not result.matrices:
                info(f"{args.path}: no per-token matrices (explained without --per-token); showing the span it holds.")
            if args.heatmap:
                _write_heatmap(result, args.heatmap, methods[0], args.granularity or "word", span, args.pattern,
                               args.path)
            check_renderable(result, span, args.path)
            view = display.SalienceView(result, methods[0], args.granularity, span, pattern=args.pattern,
                                        top=args.top, segments=saved_segments(meta))
            page = view.html() if args.html else None
            if args.share:
                _write_share(result, args, methods[0], span, _saved_model(meta), saved_segments(meta),
                             _saved_ablation(meta))
    except SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    if args.html:
        atomic_write_text(args.html, page)
        info(f"Wrote {args.html}")
    console().print(view)
    return EXIT_OK

