"""The `sequence-salience` command: explain one prompt, or a JSONL file of prompts, from a shell.

    sequence-salience explain --prompt "What is the capital of France?"
    sequence-salience explain --prompt-file prompt.txt --system "Be brief." --target " Paris." \\
        --method grad_x_input --granularity sentence --top 5 --html out.html --json out.json
    sequence-salience explain --batch prompts.jsonl --out results/ [--html]
    sequence-salience explain --prompt "..." --per-token --json full.json --heatmap map.png
    sequence-salience show results/00003.json --granularity sentence [--html out.html]
    sequence-salience evaluate --batch prompts.jsonl --out eval/ [--ray [auto|ADDRESS]]

`explain` loads the model, generates the greedy response (unless --target is
given), computes the salience of the whole response (or of --span T0:T1 of its
tokens) directly -- ONE forward + backward for grad_norm and grad_x_input, one
batch of steps for integrated_gradients / smooth_grad -- and prints the coloured
prompt, the response and a table of the top segments. The per-token matrices
(every response token's own salience: one backward per token, minutes on a CPU)
are computed only when an output needs them: --per-token (then --json holds
them and `show` can re-render any span) or --heatmap. `--batch` reads one JSON object per line
({"prompt": ..., "system": ..., "target": ..., "chat": ..., "id": ...}; only
"prompt" is required), writes OUT/<id or line number>.json (and .html with
--html) per row, appends one line per row to OUT/log.jsonl, shows a progress
bar, reports a bad row with its line number and goes on. Rerunning the same
command skips rows whose result file already holds the same input and
settings (resumable; files are written atomically, so an interrupted run
leaves no half-written result); a row saved with matrices also answers a run
without --per-token, a row saved without them is redone when matrices are needed
or another span is asked for. `show` re-renders a saved result without a model.
`evaluate` measures which method is faithful over a batch (see `evaluate --help`).

Exit codes:
  0   everything asked for was explained and written
  1   --batch finished, but some rows failed (each reported with its line number)
  2   usage or input error: bad flags, unreadable or empty prompt file, bad prompt
      or target (too long, empty), unknown method/granularity, bad regex or span
  3   the model could not be loaded
  130 interrupted (Ctrl-C); finished batch rows are kept and a rerun resumes
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from sequence_salience.files import atomic_write_text

EXIT_OK = 0
EXIT_ROWS_FAILED = 1
EXIT_USAGE = 2
EXIT_MODEL = 3
EXIT_INTERRUPTED = 130

LOG_NAME = "log.jsonl"
_ROW_KEYS = ("prompt", "system", "target", "chat", "id", "case")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class UsageError(Exception):
    """A problem with the command line or its input files (exit code 2)."""


def _granularities() -> tuple[str, ...]:
    from sequence_salience import aggregate  # pylint: disable=import-outside-toplevel

    return aggregate.GRANULARITIES


def build_parser() -> argparse.ArgumentParser:
    from sequence_salience import DEFAULT_MODEL, list_methods  # pylint: disable=import-outside-toplevel
    from sequence_salience.methods import DEFAULT_METHODS  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(
        prog="sequence-salience", description=__doc__.split("\n\n")[0],
        epilog=__doc__[__doc__.index("Exit codes:"):], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{explain,evaluate,show}")

    def display_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--method", default=None,
                       help=f"salience method(s), comma-separated; the first is shown (one of {', '.join(list_methods())}; "
                            f"explain default: {_explain_default()})")
        p.add_argument("--granularity", default="word", choices=_granularities(), help="segments shown (default: word)")
        p.add_argument("--pattern", default=None, help="regex for --granularity regex, e.g. '[^,;.]+'")
        p.add_argument("--span", default=None, metavar="T0:T1",
                       help="explain response tokens T0..T1-1 only (default: the whole response)")
        p.add_argument("--top", type=int, default=10, help="how many top segments to list (default: 10)")

    ex = sub.add_parser("explain", help="explain a prompt (or a JSONL file of prompts) with a model",
                        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog=__doc__[__doc__.index("Exit codes:"):])
    src = ex.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text (the user turn when the model has a chat template)")
    src.add_argument("--prompt-file", help="read the prompt from this UTF-8 text file ('-' for stdin)")
    src.add_argument("--batch", metavar="PROMPTS.jsonl", help="explain every row of a JSONL file (needs --out)")
    ex.add_argument("--model", default=DEFAULT_MODEL,
                    help="'default' (embedded SmolLM2-135M-Instruct), a local HF folder, a .gguf file or a Hub id")
    ex.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    ex.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default: float32)")
    ex.add_argument("--system", default=None, help="system prompt (needs a chat template)")
    ex.add_argument("--raw", action="store_true", help="do not apply the chat template; explain the raw text")
    ex.add_argument("--target", default=None, help="text to explain after the prompt (default: greedy generation)")
    ex.add_argument("--max-new-tokens", type=int, default=64, help="longest generated response (default: 64)")
    ex.add_argument("--ig-steps", type=int, default=16, help="integrated gradients steps (default: 16)")
    display_flags(ex)
    ex.add_argument("--html", nargs="?", const="", default=None, metavar="PATH",
                    help="write a self-contained HTML file (with --batch: no PATH, one per row)")
    ex.add_argument("--json", default=None, metavar="PATH",
                    help="write the result as JSON (SalienceResult.load); it holds the per-token matrices only "
                         "with --per-token, else the explained span's salience")
    ex.add_argument("--per-token", action="store_true",
                    help="also compute every response token's own salience (the per-token matrices: one backward "
                         "per token, minutes on a CPU); needed to re-render other spans with `show` (default: "
                         "one forward+backward for the whole response or --span)")
    ex.add_argument("--heatmap", default=None, metavar="PATH",
                    help="write a PNG heatmap (response tokens x prompt segments); computes the per-token matrices")
    ex.add_argument("--out", default=None, metavar="DIR", help="--batch output folder")
    ex.add_argument("--force", action="store_true", help="--batch: redo rows that already have a result")
    ex.add_argument("--quiet", action="store_true", help="print no coloured text or table (files and errors only)")

    ev = sub.add_parser("evaluate", help="which method is faithful: faithfulness curves vs. baselines over a JSONL "
                                         "batch, with a summary and an HTML report",
                        description=EVALUATE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ev.add_argument("--batch", metavar="PROMPTS.jsonl", required=True, help="rows as for explain --batch")
    ev.add_argument("--out", metavar="DIR", required=True,
                    help="output folder: <row>.json, log.jsonl, summary.json, report.html")
    ev.add_argument("--model", default=DEFAULT_MODEL, help="as for explain (default: the embedded model)")
    ev.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    ev.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default: float32)")
    ev.add_argument("--raw", action="store_true", help="do not apply the chat template")
    ev.add_argument("--method", default=",".join(DEFAULT_METHODS),
                    help=f"methods compared, comma-separated (default: {','.join(DEFAULT_METHODS)}; any of "
                         f"{', '.join(list_methods())})")
    ev.add_argument("--granularity", default="sentence", choices=_granularities(),
                    help="segments removed (default: sentence)")
    ev.add_argument("--pattern", default=None, help="regex for --granularity regex")
    ev.add_argument("--steps", type=int, default=10, help="curve points after the start (default: 10)")
    ev.add_argument("--n-random", type=int, default=None,
                    help="seeded random orders for the random baseline (default: the library's)")
    ev.add_argument("--removal", default="filler", choices=("filler", "delete"),
                    help="replace a removed segment's tokens by a space token (filler, default) or delete its text")
    ev.add_argument("--max-new-tokens", type=int, default=64, help="longest generated response (default: 64)")
    ev.add_argument("--ig-steps", type=int, default=16, help="integrated gradients steps (default: 16)")
    ev.add_argument("--reduction", action="store_true", help="also report the input-reduction size per method")
    ev.add_argument("--ig-completeness", action="store_true",
                    help="also report integrated gradients' relative completeness error per row")
    ev.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the CIs (default: 2000)")
    ev.add_argument("--force", action="store_true", help="redo rows that already have a result")
    ev.add_argument("--ray", nargs="?", const="", default=None, metavar="auto|ADDRESS",
                    help="run the rows on Ray actors: no value = a local instance, 'auto' = the cluster started "
                         "on this machine with `ray start`, or HOST:PORT (needs the [ray] extra)")
    ev.add_argument("--workers", type=int, default=None,
                    help="--ray: worker actors (default: local 2, cluster: its GPUs / --gpus-per-worker, or CPUs)")
    ev.add_argument("--gpus-per-worker", type=float, default=0.0,
                    help="--ray: GPUs per worker (default 0: CPU workers; > 0 puts the model on cuda)")
    ev.add_argument("--cpus-per-worker", type=float, default=1.0, help="--ray: CPUs per worker (default: 1)")

    sh = sub.add_parser("show", help="render a saved result (JSON) in the terminal or as HTML, without a model")
    sh.add_argument("path", help="a JSON file written by explain --json / --batch or result.to_json")
    display_flags(sh)
    sh.add_argument("--html", default=None, metavar="PATH", help="write a self-contained HTML file")
    sh.add_argument("--heatmap", default=None, metavar="PATH",
                    help="write a PNG heatmap (needs a result explained with --per-token)")
    return parser


# ----------------------------------------------------------------------------
# Helpers


def _parse_span(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or int(m.group(1)) >= int(m.group(2)):
        raise UsageError(f"--span {text!r}: write T0:T1 with T0 < T1, e.g. --span 0:3 (response token indices).")
    return int(m.group(1)), int(m.group(2))


def _explain_default() -> str:
    """The method `explain` shows when --method is not given: gradient x input."""
    from sequence_salience.methods import grad_x_input  # pylint: disable=import-outside-toplevel

    return grad_x_input.NAME


def _parse_methods(text: str | None) -> tuple[str, ...]:
    from sequence_salience import SalienceError, get_method  # pylint: disable=import-outside-toplevel

    names = tuple(m.strip() for m in (text or _explain_default()).split(",") if m.strip())
    if not names:
        raise UsageError(f"--method is empty. Fix: e.g. --method {_explain_default()}.")
    for name in names:
        try:
            get_method(name)
        except SalienceError as e:
            raise UsageError(str(e)) from None
    return names


def _read_prompt_file(path: str) -> str:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except FileNotFoundError:
        raise UsageError(f"--prompt-file {path}: no such file. Fix: check the path.") from None
    except IsADirectoryError:
        raise UsageError(f"--prompt-file {path} is a folder. Fix: give a text file.") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--prompt-file {path} is not UTF-8 text ({e.reason} at byte {e.start}). "
                         "Fix: save it as UTF-8.") from None
    except OSError as e:
        raise UsageError(f"--prompt-file {path}: cannot read it ({e.strerror}).") from None
    if text.endswith("\n"):
        text = text[:-1]  # editors end files with a newline; it is not part of the prompt
    if not text.strip():
        raise UsageError(f"--prompt-file {path} is empty. Fix: write the prompt into it.")
    return text


def _console(stderr: bool = False):
    from rich.console import Console  # pylint: disable=import-outside-toplevel

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def _err(msg: str) -> None:
    print(f"sequence-salience: error: {msg}", file=sys.stderr, flush=True)


def _info(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load_model(args):
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel

    _info(f"Loading model {args.model!r} ...")
    start = time.perf_counter()
    lm = ss.load_model(args.model, device=args.device, dtype=args.dtype, log=_info)
    _info(f"Model ready after {time.perf_counter() - start:.1f} s.")
    return lm


def _settings(args, methods: tuple[str, ...]) -> dict[str, Any]:
    """What, besides the row, decides a result: a batch row is redone when any of it changes."""
    return {"model": args.model, "dtype": args.dtype, "methods": list(methods), "ig_steps": args.ig_steps,
            "max_new_tokens": args.max_new_tokens, "raw": bool(args.raw)}


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
    _info(f"Wrote {path}")


# ----------------------------------------------------------------------------
# explain (one prompt)


def _explain_single(args, methods, span) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    if args.out is not None or args.force:
        raise UsageError("--out and --force go with --batch. Fix: use --json/--html PATH for one prompt.")
    if args.html == "":
        raise UsageError("--html needs a PATH for one prompt (e.g. --html salience.html).")
    per_token = needs_matrices(args)
    prompt = args.prompt if args.prompt is not None else _read_prompt_file(args.prompt_file)
    if not prompt.strip():
        raise UsageError("--prompt is empty. Fix: give the prompt text.")
    try:
        lm = _load_model(args)
    except ss.SalienceError as e:
        _err(f"cannot load --model {args.model!r}: {e}")
        return EXIT_MODEL
    timings: dict[str, float] = {}

    def progress(method, done, total):
        print(f"\r  {method}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    try:
        _info("Generating ..." if args.target is None else "Explaining the given target ...")
        result, generated = explain_one(lm, prompt, args.system, args.target, False if args.raw else None, methods,
                                        args.ig_steps, args.max_new_tokens, progress, span=span, per_token=per_token,
                                        timings=timings)
    except ss.SalienceError as e:
        _err(str(e))
        return EXIT_USAGE
    took = f"in {timings['salience']:.1f} s" + (f" (generation: {timings['generate']:.1f} s)" if generated else "")
    if per_token:
        _info(f"Explained {result.num_targets} response tokens one by one (per-token matrices) {took}.")
    else:
        _info(f"Explained {_span_label(result, span)} directly {took}; "
              "no per-token matrices (--per-token computes them).")
    meta = {"input": {"prompt": prompt, "system": args.system or "", "target": args.target or ""},
            "settings": _settings(args, methods), "generated": generated, "matrices": per_token}
    if args.json:
        display.to_json(result, args.json, meta)
        _info(f"Wrote {args.json}" + ("" if per_token else " (this span only; no per-token matrices)"))
    try:
        view = display.SalienceView(result, methods[0], args.granularity, span, pattern=args.pattern, top=args.top)
        if args.heatmap:
            _write_heatmap(result, args.heatmap, methods[0], args.granularity, span, args.pattern, "this result")
    except ss.SalienceError as e:
        _err(str(e))
        return EXIT_USAGE
    if args.html:
        atomic_write_text(args.html, view.html())
        _info(f"Wrote {args.html}")
    if not args.quiet:
        _console().print(view)
    return EXIT_OK


# ----------------------------------------------------------------------------
# explain --batch


def parse_row(line: str, lineno: int) -> dict[str, Any]:
    """One JSONL row -> {"prompt", "system", "target", "chat", "id"}; UsageError names the problem."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UsageError(f"not valid JSON ({e.msg} at column {e.colno}); write one object per line, "
                         'e.g. {"prompt": "..."}') from None
    if not isinstance(obj, dict):
        raise UsageError(f'expected a JSON object, got {type(obj).__name__}; write {{"prompt": "..."}}')
    unknown = sorted(set(obj) - set(_ROW_KEYS))
    if unknown:
        raise UsageError(f"unknown field(s) {unknown}; a row may have {list(_ROW_KEYS)}")
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise UsageError('field "prompt" is missing or empty; every row needs a non-empty prompt string')
    row = {"prompt": prompt}
    for key in ("system", "target", "case"):
        value = obj.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise UsageError(f'field "{key}" must be a string, got {type(value).__name__}')
        row[key] = value
    chat = obj.get("chat")
    if chat is not None and not isinstance(chat, bool):
        raise UsageError(f'field "chat" must be true or false, got {chat!r}')
    row["chat"] = chat
    rid = obj.get("id")
    if rid is None:
        row["id"] = f"{lineno:05d}"
    else:
        rid = str(rid) if isinstance(rid, int) and not isinstance(rid, bool) else rid
        if not isinstance(rid, str) or not _ID_RE.match(rid):
            raise UsageError(f'field "id" {rid!r} must be letters, digits, "_", "-" or "." (it names the output file)')
        row["id"] = rid
    return row


def _read_batch(path: str) -> list[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise UsageError(f"--batch {path}: no such file. Fix: check the path.") from None
    except IsADirectoryError:
        raise UsageError(f"--batch {path} is a folder. Fix: give a .jsonl file.") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--batch {path} is not UTF-8 text ({e.reason} at byte {e.start}).") from None
    except OSError as e:
        raise UsageError(f"--batch {path}: cannot read it ({e.strerror}).") from None
    rows = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
    if not rows:
        raise UsageError(f"--batch {path} has no rows. Fix: write one JSON object per line, e.g. "
                         '{"prompt": "What is the capital of France?"}')
    return rows


def reusable(saved: Any, wanted: dict) -> bool | None:
    """Whether a saved row's fingerprint answers this run: True, False, or None (only if it holds the span).

    The row and settings must be equal. A row saved with the per-token matrices ("matrices": true,
    or no such key: rows written before span-only runs existed) answers every run and span; a
    span-only row never answers a run that needs matrices, and answers a span-only run only when
    it holds the span asked for (None: look at the result).
    """
    if not isinstance(saved, dict):
        return False
    base = {k: v for k, v in saved.items() if k != "matrices"}
    if base != {k: v for k, v in wanted.items() if k != "matrices"}:
        return False
    if saved.get("matrices", True):
        return True
    return None if not wanted["matrices"] else False


def _existing_result(path: str, fingerprint: dict, methods: Sequence[str], span: tuple[int, int] | None) -> bool:
    """True when path holds a complete result for this input and these settings that can show `span`."""
    from sequence_salience import SalienceError  # pylint: disable=import-outside-toplevel
    from sequence_salience.result import result_from_dict  # pylint: disable=import-outside-toplevel

    saved = _saved_meta(path, "result")
    if saved is None:
        return False
    obj, meta = saved
    ok = reusable(meta.get("fingerprint"), fingerprint)
    if ok is not None:
        return ok
    try:
        result = result_from_dict(obj, path)
    except (SalienceError, KeyError, TypeError, ValueError):
        return False
    t0, t1 = span if span is not None else (0, result.num_targets)
    return t1 <= result.num_targets and all(m in result.spans.get((t0, t1), {}) for m in methods)


def _append_log(out_dir: str, entry: dict) -> None:
    entry = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **entry}
    with open(os.path.join(out_dir, LOG_NAME), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        f.flush()


def _valid_rows(batch: str, out: str) -> tuple[list[tuple[int, str]], list[tuple[int, dict]], list[tuple[int, str]]]:
    """Reads the batch file and creates OUT; returns (lines, valid rows, failures).

    Every row is validated first: a bad row (or a repeated id) is reported with its line number,
    logged to OUT/log.jsonl and skipped.
    """
    lines = _read_batch(batch)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create it ({e.strerror}).") from None
    rows: list[tuple[int, dict]] = []
    failures: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for lineno, line in lines:
        try:
            row = parse_row(line, lineno)
            if row["id"] in seen:
                raise UsageError(f'id {row["id"]!r} repeats line {seen[row["id"]]}; ids name the output files')
            seen[row["id"]] = lineno
            rows.append((lineno, row))
        except UsageError as e:
            failures.append((lineno, str(e)))
            _err(f"{batch}:{lineno}: {e}")
            _append_log(out, {"line": lineno, "status": "error", "error": str(e)})
    return lines, rows, failures


def _saved_meta(path: str, body: str) -> tuple[dict, dict] | None:
    """(whole object, its "meta") of a saved row file that has `body` and a meta dict, else None."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    meta = obj.get("meta") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or body not in obj:
        return None
    return obj, meta


def _explain_batch(args, methods, span) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn  # pylint: disable=import-outside-toplevel

    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    if not args.out:
        raise UsageError("--batch needs --out DIR (where the per-row results go).")
    if args.html not in (None, ""):
        raise UsageError("With --batch, --html takes no PATH: it writes OUT/<row>.html next to each JSON.")
    if args.json is not None:
        raise UsageError("With --batch, results are always JSON in --out; drop --json.")
    if args.system is not None or args.target is not None:
        raise UsageError("With --batch, the system prompt and target come from each row; drop --system/--target.")
    if args.heatmap is not None:
        raise UsageError("--heatmap writes one PNG for one prompt. Fix: run the batch with --per-token, then "
                         "`sequence-salience show OUT/<id>.json --heatmap PATH` for the rows you want.")
    per_token = needs_matrices(args)
    lines, rows, failures = _valid_rows(args.batch, args.out)

    settings = _settings(args, methods)
    todo, skipped = [], 0
    for lineno, row in rows:
        fingerprint = {"row": {k: row[k] for k in ("prompt", "system", "target", "chat")}, "settings": settings,
                       "matrices": per_token}
        json_path = os.path.join(args.out, row["id"] + ".json")
        if not args.force and _existing_result(json_path, fingerprint, methods, span):
            skipped += 1
            if args.html == "" and not os.path.exists(os.path.join(args.out, row["id"] + ".html")):
                todo.append((lineno, row, fingerprint, "html-only"))
            else:
                _append_log(args.out, {"line": lineno, "id": row["id"], "status": "skipped"})
            continue
        todo.append((lineno, row, fingerprint, "explain"))
    _info(f"{len(lines)} row(s): {len(todo)} to do, {skipped} already done, {len(failures)} invalid.")

    lm = None
    if any(kind == "explain" for *_, kind in todo):
        try:
            lm = _load_model(args)
        except ss.SalienceError as e:
            _err(f"cannot load --model {args.model!r}: {e}")
            return EXIT_MODEL

    done = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=_console(stderr=True), transient=False) as bar:
        task = bar.add_task("rows", total=len(todo))
        for lineno, row, fingerprint, kind in todo:
            rid = row["id"]
            json_path = os.path.join(args.out, rid + ".json")
            html_path = os.path.join(args.out, rid + ".html")
            start = time.perf_counter()
            bar.update(task, description=f"line {lineno} ({rid})")

            def progress(method, d, total, _line=lineno, _rid=rid):
                bar.update(task, description=f"line {_line} ({_rid}): {method} {d}/{total}")

            try:
                if kind == "html-only":
                    result = display.load(json_path)
                else:
                    result, generated = explain_one(
                        lm, row["prompt"], row["system"], row["target"] or None,
                        False if args.raw else row["chat"], methods, args.ig_steps, args.max_new_tokens, progress,
                        span=span, per_token=per_token)
                    meta = {"input": {k: row[k] for k in ("id", "case", "prompt", "system", "target", "chat")},
                            "line": lineno, "fingerprint": fingerprint, "settings": settings, "generated": generated,
                            "matrices": per_token}
                if args.html == "":
                    atomic_write_text(html_path, display.render_html(
                        result, methods[0], args.granularity, span, pattern=args.pattern, top=args.top,
                        title=f"{os.path.basename(args.batch)} line {lineno} ({rid})"))
                if kind != "html-only":
                    display.to_json(result, json_path, meta)  # last: its presence marks the row as done
            except ss.SalienceError as e:
                failures.append((lineno, str(e)))
                bar.console.print(f"[red]sequence-salience: error:[/red] {args.batch}:{lineno} ({rid}): {e}",
                                  markup=True, highlight=False)
                _append_log(args.out, {"line": lineno, "id": rid, "status": "error", "error": str(e)})
            else:
                done += kind == "explain"
                _append_log(args.out, {"line": lineno, "id": rid, "status": "done" if kind == "explain" else "html",
                                       "seconds": round(time.perf_counter() - start, 3), "file": rid + ".json"})
            bar.advance(task)
        bar.update(task, description="rows")

    _info(f"Done: {done} explained, {skipped} skipped (already done), {len(failures)} failed; results in {args.out}")
    for lineno, msg in sorted(failures):
        _info(f"  line {lineno}: {msg}")
    return EXIT_ROWS_FAILED if failures else EXIT_OK


# ----------------------------------------------------------------------------
# evaluate --batch

EVALUATE_HELP = """Which salience method is faithful on your model and prompts.

For every row of the batch (as for explain --batch) and every --method: the deletion and
insertion curves of log p(response) as the prompt's segments are removed / revealed in the
method's order, the same for the baselines (seeded random orders; every other reference curve
the library reports), AOPC and the gap to each baseline; optionally the input-reduction size
(--reduction) and integrated gradients' completeness error (--ig-completeness). Writes
OUT/<row>.json (atomically; a rerun skips rows already done with the same settings),
OUT/log.jsonl, OUT/summary.json (per method: mean AOPC gap to each baseline, bootstrap CI,
win rate, verdict) and OUT/report.html (self-contained, with plots). A failing row is reported
with its line number and the rest goes on (exit code 1).

--ray runs the rows on Ray actors (one model load per actor, rows handed out as actors free
up; the driver writes every file); a worker that dies loses only its row, which is retried.
"""


def _eval_config(args, methods):
    import dataclasses  # pylint: disable=import-outside-toplevel

    from sequence_salience.evaluate import EvalConfig  # pylint: disable=import-outside-toplevel
    from sequence_salience.explain import FaithfulnessConfig  # pylint: disable=import-outside-toplevel

    faith = FaithfulnessConfig(granularity=args.granularity, pattern=args.pattern, steps=args.steps,
                               removal=args.removal)
    if args.n_random is not None:
        faith = dataclasses.replace(faith, n_random=args.n_random)
    return EvalConfig(methods=methods, faithfulness=faith, ig_steps=args.ig_steps, max_new_tokens=args.max_new_tokens,
                      raw=bool(args.raw), reduction=args.reduction, ig_completeness=args.ig_completeness)


def _evaluate_batch(args, methods) -> int:
    import contextlib  # pylint: disable=import-outside-toplevel

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn  # pylint: disable=import-outside-toplevel

    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import display, evaluate  # pylint: disable=import-outside-toplevel

    if args.steps < 1 or args.n_boot < 1 or (args.n_random is not None and args.n_random < 1):
        raise UsageError("--steps, --n-boot and --n-random must be at least 1.")
    if args.ray is None and (args.workers is not None or args.gpus_per_worker):
        raise UsageError("--workers and --gpus-per-worker go with --ray. Fix: add --ray (a local instance) "
                         "or --ray auto / --ray HOST:PORT.")
    if args.ray is not None and not evaluate.ray_available():
        raise UsageError("--ray needs Ray. Fix: pip install 'sequence-salience[ray]', or run without --ray.")
    if args.gpus_per_worker < 0 or args.cpus_per_worker <= 0 or (args.workers is not None and args.workers < 1):
        raise UsageError("--gpus-per-worker must be >= 0, --cpus-per-worker > 0 and --workers >= 1.")
    if args.granularity == "regex" and not args.pattern:
        raise UsageError("--granularity regex needs --pattern, e.g. --pattern '[^,;.]+'.")
    try:
        if args.pattern:
            from sequence_salience import aggregate  # pylint: disable=import-outside-toplevel

            aggregate.compile_pattern(args.pattern)
        config = _eval_config(args, methods)
    except ss.SalienceError as e:
        raise UsageError(str(e)) from None
    lines, rows, failures = _valid_rows(args.batch, args.out)
    settings = {"model": args.model, "dtype": args.dtype, "evaluation": config.fingerprint()}
    done_rows: dict[int, dict] = {}  # line -> saved row file (reused or new)
    todo = []
    for lineno, row in rows:
        fingerprint = {"row": {k: row[k] for k in ("prompt", "system", "target", "chat")}, "settings": settings}
        path = os.path.join(args.out, row["id"] + ".json")
        saved = None if args.force else _saved_meta(path, "evaluation")
        if saved is not None and saved[1].get("fingerprint") == fingerprint:
            done_rows[lineno] = {"id": row["id"], "line": lineno, "evaluation": saved[0]["evaluation"]}
            _append_log(args.out, {"line": lineno, "id": row["id"], "status": "skipped"})
            continue
        todo.append((lineno, row, fingerprint))
    skipped = len(done_rows)
    _info(f"{len(lines)} row(s): {len(todo)} to do, {skipped} already done, {len(failures)} invalid.")

    spec = evaluate.ModelSpec(args.model, args.device, args.dtype)
    by_line = {lineno: (row, fp) for lineno, row, fp in todo}
    tasks = [(lineno, row) for lineno, row, _ in todo]
    if not tasks:
        outcomes = contextlib.nullcontext(iter(()))
    elif args.ray is None:
        try:
            lm = _load_model(args)
        except ss.SalienceError as e:
            _err(f"cannot load --model {args.model!r}: {e}")
            return EXIT_MODEL
        outcomes = contextlib.closing(evaluate.run_serial(tasks, evaluate.RowWorker(spec, config, lm=lm)))
    else:
        workers = args.workers if args.workers is not None or args.ray else 2
        outcomes = contextlib.closing(evaluate.run_ray(
            tasks, spec, config, address=args.ray or None, num_workers=workers,
            gpus_per_worker=args.gpus_per_worker, cpus_per_worker=args.cpus_per_worker, log=_info))

    start = time.perf_counter()
    n_new = 0
    with outcomes as stream, Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn(), console=_console(stderr=True), transient=False) as bar:
        task = bar.add_task("rows", total=len(tasks))
        try:
            for outcome in stream:
                lineno = outcome.key
                row, fingerprint = by_line[lineno]
                rid = row["id"]
                if outcome.error is not None:
                    failures.append((lineno, outcome.error))
                    bar.console.print(f"[red]sequence-salience: error:[/red] {args.batch}:{lineno} ({rid}): "
                                      f"{outcome.error}", markup=True, highlight=False, soft_wrap=True)
                    _append_log(args.out, {"line": lineno, "id": rid, "status": "error", "error": outcome.error})
                else:
                    meta = {"input": {k: row[k] for k in ("id", "case", "prompt", "system", "target", "chat")},
                            "line": lineno, "fingerprint": fingerprint, "seconds": round(outcome.seconds, 3),
                            "worker": outcome.worker, "attempts": outcome.attempts}
                    obj = {"meta": meta, "evaluation": outcome.evaluation}
                    atomic_write_text(os.path.join(args.out, rid + ".json"),
                                              json.dumps(obj, ensure_ascii=False, indent=1))
                    done_rows[lineno] = {"id": rid, "line": lineno, "evaluation": outcome.evaluation}
                    n_new += 1
                    _append_log(args.out, {"line": lineno, "id": rid, "status": "done",
                                           "seconds": round(outcome.seconds, 3), "file": rid + ".json",
                                           "attempts": outcome.attempts})
                n_fail = sum(1 for ln, _ in failures if ln in by_line)
                bar.update(task, advance=1, description=f"rows ({n_fail} failed)" if n_fail else "rows")
        except ss.SalienceError as e:  # a Ray worker could not start / load the model
            _err(str(e))
            return EXIT_MODEL
    took = time.perf_counter() - start
    if n_new:
        _info(f"{n_new} row(s) evaluated in {took:.1f} s ({60 * n_new / took:.2f} rows/min).")
    _write_evaluation_summary(args, settings, sorted(done_rows.items()), failures)
    _info(f"Done: {n_new} evaluated, {skipped} skipped (already done), {len(failures)} failed; "
          f"summary in {os.path.join(args.out, 'summary.json')}, report in {os.path.join(args.out, 'report.html')}")
    for lineno, msg in sorted(failures):
        _info(f"  line {lineno}: {msg}")
    return EXIT_ROWS_FAILED if failures else EXIT_OK


def _write_evaluation_summary(args, settings, done_rows, failures) -> None:
    from sequence_salience import display, evaluate  # pylint: disable=import-outside-toplevel

    rows = [r for _, r in done_rows]
    failures = sorted(failures)
    if not rows:
        _info("No row was evaluated; no summary or report written.")
        return
    summary = evaluate.summarize([r["evaluation"] for r in rows], evaluate.SummaryConfig(n_boot=args.n_boot))
    obj = {"summary": summary, "rows": [{"id": r["id"], "line": r["line"]} for r in rows],
           "failures": [{"line": ln, "error": msg} for ln, msg in failures], "settings": settings,
           "batch": os.path.abspath(args.batch)}
    atomic_write_text(os.path.join(args.out, "summary.json"), json.dumps(obj, ensure_ascii=False, indent=1))
    page = evaluate.render_report(summary, rows, failures, title=f"Method evaluation: {os.path.basename(args.batch)}",
                                  settings=settings)
    atomic_write_text(os.path.join(args.out, "report.html"), page)
    for m in summary["methods"]:
        _info(f"  {m}: {summary['verdicts'][m]}")


# ----------------------------------------------------------------------------
# show


def _show(args, span) -> int:
    from sequence_salience import SalienceError, display  # pylint: disable=import-outside-toplevel

    try:
        result = display.load(args.path)
        methods = [m.strip() for m in args.method.split(",")] if args.method else [None]
        if not result.matrices:
            _info(f"{args.path}: no per-token matrices (explained without --per-token); showing the span it holds.")
        if args.heatmap:
            _write_heatmap(result, args.heatmap, methods[0], args.granularity, span, args.pattern, args.path)
        check_renderable(result, span, args.path)
        view = display.SalienceView(result, methods[0], args.granularity, span, pattern=args.pattern, top=args.top)
    except SalienceError as e:
        _err(str(e))
        return EXIT_USAGE
    if args.html:
        atomic_write_text(args.html, view.html())
        _info(f"Wrote {args.html}")
    _console().print(view)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with 2 on bad flags
    try:
        if args.command == "evaluate":
            return _evaluate_batch(args, _parse_methods(args.method))
        span = _parse_span(args.span)
        if args.top < 0:
            raise UsageError(f"--top {args.top}: give 0 or more.")
        if args.granularity == "regex" and not args.pattern:
            raise UsageError("--granularity regex needs --pattern, e.g. --pattern '[^,;.]+'.")
        if args.pattern:
            from sequence_salience import SalienceError, aggregate  # pylint: disable=import-outside-toplevel

            try:
                aggregate.compile_pattern(args.pattern)
            except SalienceError as e:
                raise UsageError(str(e)) from None
        if args.command == "show":
            return _show(args, span)
        methods = _parse_methods(args.method)
        if args.max_new_tokens < 1 or args.ig_steps < 1:
            raise UsageError("--max-new-tokens and --ig-steps must be at least 1.")
        if args.batch is not None:
            return _explain_batch(args, methods, span)
        return _explain_single(args, methods, span)
    except UsageError as e:
        _err(str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted; finished results are kept (a --batch rerun resumes).")
        return EXIT_INTERRUPTED


def run() -> None:
    """Console-script entry point (`sequence-salience`)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
