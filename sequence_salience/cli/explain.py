"""`sequence-salience explain` for one prompt, and `show` for a saved result: both render one
result (terminal, HTML, heatmap); explain_one is the explain step the batch shares."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from sequence_salience.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    console,
    err,
    info,
    load_model,
    reading_saved,
    read_prompt_file,
    run_settings,
)
from sequence_salience.files import atomic_write_text


def explain_one(lm, prompt: str, system: str | None, target: str | None, chat: bool | None, methods, ig_steps: int,
                max_new_tokens: int, progress=None, span: tuple[int, int] | None = None, per_token: bool = False,
                timings: dict | None = None):
    """Formats, generates (when target is None) and explains one prompt; returns (result, generated?).

    per_token=False (the default) computes only the salience of the target span (`span`, or the
    whole response) with compute_span_result: one forward + backward for the gradient methods.
    The result has `spans` and no `matrices`. per_token=True computes the per-token matrices with
    compute_salience (one backward per target token); every span renders from them.
    timings: optional dict that receives the seconds spent in "generate" and "salience".
    """
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel

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
    config = ss.SalienceConfig(ig_steps=ig_steps)
    t0, t1 = span if span is not None else (0, None)
    start = time.perf_counter()
    if not per_token:
        result = ss.compute_span_result(lm, chat_prompt, explained, methods=methods, t0=t0, t1=t1, config=config,
                                        progress=progress)
    else:
        result = ss.compute_salience(lm, chat_prompt, explained, methods=methods, config=config, progress=progress)
        missing = [m for m in methods if not result.has_span(m, t0, t1)]
        if missing:  # grad_norm when the result is too large to keep its Gram tensor: one more backward
            result = result.merged(ss.compute_span_result(lm, chat_prompt, explained, methods=missing, t0=t0, t1=t1,
                                                          config=config))
    timings["salience"] = time.perf_counter() - start
    return result, not isinstance(explained, str)


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


def explain_single(args, methods, span) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    if args.out is not None or args.force:
        raise UsageError("--out and --force go with --batch. Fix: use --json/--html PATH for one prompt.")
    if args.html == "":
        raise UsageError("--html needs a PATH for one prompt (e.g. --html salience.html).")
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
        result, generated = explain_one(lm, prompt, args.system, args.target, False if args.raw else None, methods,
                                        args.ig_steps, args.max_new_tokens, progress, span=span, per_token=per_token,
                                        timings=timings)
    except ss.SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    took = f"in {timings['salience']:.1f} s" + (f" (generation: {timings['generate']:.1f} s)" if generated else "")
    if per_token:
        info(f"Explained {result.num_targets} response tokens one by one (per-token matrices) {took}.")
    else:
        info(f"Explained {_span_label(result, span)} directly {took}; "
              "no per-token matrices (--per-token computes them).")
    meta = {"input": {"prompt": prompt, "system": args.system or "", "target": args.target or ""},
            "settings": run_settings(args, methods), "generated": generated, "matrices": per_token}
    if args.json:
        display.to_json(result, args.json, meta)
        info(f"Wrote {args.json}" + ("" if per_token else " (this span only; no per-token matrices)"))
    try:
        view = display.SalienceView(result, methods[0], args.granularity, span, pattern=args.pattern, top=args.top)
        if args.heatmap:
            _write_heatmap(result, args.heatmap, methods[0], args.granularity, span, args.pattern, "this result")
    except ss.SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    if args.html:
        atomic_write_text(args.html, view.html())
        info(f"Wrote {args.html}")
    if not args.quiet:
        console().print(view)
    return EXIT_OK


def show(args, span) -> int:
    from sequence_salience import SalienceError, display  # pylint: disable=import-outside-toplevel

    try:
        with reading_saved(args.path):
            result = display.load(args.path)
            methods = [m.strip() for m in args.method.split(",")] if args.method else [None]
            if not result.matrices:
                info(f"{args.path}: no per-token matrices (explained without --per-token); showing the span it holds.")
            if args.heatmap:
                _write_heatmap(result, args.heatmap, methods[0], args.granularity, span, args.pattern, args.path)
            check_renderable(result, span, args.path)
            view = display.SalienceView(result, methods[0], args.granularity, span, pattern=args.pattern,
                                        top=args.top)
            page = view.html() if args.html else None
    except SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    if args.html:
        atomic_write_text(args.html, page)
        info(f"Wrote {args.html}")
    console().print(view)
    return EXIT_OK

