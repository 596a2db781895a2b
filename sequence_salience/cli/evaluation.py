"""`sequence-salience evaluate`: which method is faithful, over a JSONL batch (serially or on Ray)."""

from __future__ import annotations

import json
import os
import time

from sequence_salience.cli.batch import append_log, row_fingerprint, saved_meta, valid_rows
from sequence_salience.cli.common import (
    EXIT_MODEL,
    EXIT_OK,
    EXIT_ROWS_FAILED,
    UsageError,
    check_pattern_flags,
    err,
    info,
    load_model,
    plain,
    progress_bar,
)
from sequence_salience.files import atomic_write_text

EVALUATE_HELP = """Which salience method is faithful on your model and prompts.

For every row of the batch (as for explain --batch) and every --method: the deletion and
insertion curves of log p(response) as the prompt's segments are removed / revealed in the
method's order, the same for the baselines (seeded random orders; every other reference curve
the library reports), AOPC and the gap to each baseline; the best order the test can find (its upper bound: when even
that order does not beat the baselines by the noise, the row is "not decidable on this prompt";
--no-upper-bound skips it); optionally the input-reduction size (--reduction) and integrated
gradients' completeness error (--ig-completeness). Writes OUT/<row>.json (atomically; a rerun
skips rows already done with the same settings), OUT/log.jsonl, OUT/summary.json (per method:
mean AOPC gap to each baseline, bootstrap CI, win rate, verdict; paired comparisons with the
--reference method: mean AOPC difference, bootstrap CI, rows better / worse / tied; the count of
rows not decidable) and OUT/report.html (self-contained, with plots). A failing row is reported
with its line number and the rest goes on (exit code 1).

--ray runs the rows on Ray actors (one model load per actor, rows handed out as actors free
up; the driver writes every file); a worker that dies loses only its row, which is retried.
Without an address it starts a local Ray instance whose every port listens on loopback only.
"""


def _eval_config(args, methods):
    import dataclasses  # pylint: disable=import-outside-toplevel

    from sequence_salience.cli.common import flag_settings  # pylint: disable=import-outside-toplevel
    from sequence_salience.evaluate import EvalConfig  # pylint: disable=import-outside-toplevel
    from sequence_salience.explain import FaithfulnessConfig  # pylint: disable=import-outside-toplevel

    faith = FaithfulnessConfig(granularity=args.granularity, pattern=args.pattern, steps=args.steps,
                               removal=args.removal, upper_bound=not args.no_upper_bound)
    if args.n_random is not None:
        faith = dataclasses.replace(faith, n_random=args.n_random)
    return EvalConfig(methods=methods, faithfulness=faith, max_new_tokens=args.max_new_tokens, raw=bool(args.raw),
                      reduction=args.reduction, ig_completeness=args.ig_completeness,
                      **flag_settings(args, ("token",)))  # the methods' counts it has flags for


def _is_curve(name: str, methods) -> bool:
    """Whether `name` is a curve the rows will hold: a method, or a signed method + ":abs"."""
    from sequence_salience.explain.faithfulness import ABS_SUFFIX  # pylint: disable=import-outside-toplevel
    from sequence_salience.methods import get_method  # pylint: disable=import-outside-toplevel

    base = name.removesuffix(ABS_SUFFIX)
    return base in methods and (base == name or get_method(base).signed)


def _checked_config(args, methods):
    """The EvalConfig of the flags; UsageError naming the flag and its fix when they cannot run."""
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import evaluate  # pylint: disable=import-outside-toplevel

    if args.n_boot < 1 or (args.n_random is not None and args.n_random < 1):  # --steps: its rule (field_rules)
        raise UsageError("--n-boot and --n-random must be at least 1.")
    if args.ray is None and (args.workers is not None or args.gpus_per_worker):
        raise UsageError("--workers and --gpus-per-worker go with --ray. Fix: add --ray (a local instance) "
                         "or --ray auto / --ray HOST:PORT.")
    if args.ray is not None and not evaluate.ray_available():
        raise UsageError("--ray needs Ray. Fix: pip install 'sequence-salience[ray]', or run without --ray.")
    if args.gpus_per_worker < 0 or args.cpus_per_worker <= 0 or (args.workers is not None and args.workers < 1):
        raise UsageError("--gpus-per-worker must be >= 0, --cpus-per-worker > 0 and --workers >= 1.")
    check_pattern_flags(args)
    try:
        config = _eval_config(args, methods)
    except ss.SalienceError as e:
        raise UsageError(str(e)) from None
    if args.reference is not None and not _is_curve(args.reference, methods):
        raise UsageError(f"--reference {args.reference} is not among the methods evaluated ({', '.join(methods)}). "
                         f"Fix: add it to --method, or pick one of them.")
    return config


def _rows_to_do(args, rows, settings, failures) -> tuple[dict[int, dict], list[tuple[int, dict, dict]]]:
    """(line -> the row's saved evaluation, reused; the (line, row, fingerprint) still to evaluate): a saved
    row file of the same row and settings is reused (unless --force), one not as evaluate writes it is a
    failure (added to `failures`); each is logged."""
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import evaluate  # pylint: disable=import-outside-toplevel

    done_rows: dict[int, dict] = {}
    todo = []
    for lineno, row in rows:
        fingerprint = {"row": row_fingerprint(row), "settings": settings}
        path = os.path.join(args.out, row["id"] + ".json")
        saved = None if args.force else saved_meta(path, "evaluation")
        if saved is not None and saved[1].get("fingerprint") == fingerprint:
            try:  # a file edited by hand must neither crash the run nor reach the report unchecked
                evaluate.check_evaluation(saved[0]["evaluation"])
            except ss.SalienceError as e:
                msg = f"its saved result {path} is not as evaluate writes it: {e}. Fix: delete that file or rerun with --force"
                failures.append((lineno, msg))
                err(f"{args.batch}:{lineno} ({row['id']}): {msg}")
                append_log(args.out, {"line": lineno, "id": row["id"], "status": "error", "error": msg})
                continue
            done_rows[lineno] = {"id": row["id"], "line": lineno, "evaluation": saved[0]["evaluation"]}
            append_log(args.out, {"line": lineno, "id": row["id"], "status": "skipped"})
            continue
        todo.append((lineno, row, fingerprint))
    return done_rows, todo


def _outcomes(args, config, tasks):
    """A context manager over the stream of row outcomes: none, serial on this process's model, or on Ray."""
    import contextlib  # pylint: disable=import-outside-toplevel

    from sequence_salience import evaluate  # pylint: disable=import-outside-toplevel

    spec = evaluate.ModelSpec(args.model, args.device, args.dtype)
    if not tasks:
        return contextlib.nullcontext(iter(()))
    if args.ray is None:
        return contextlib.closing(evaluate.run_serial(tasks, evaluate.RowWorker(spec, config, lm=load_model(args))))
    workers = args.workers if args.workers is not None or args.ray else 2
    return contextlib.closing(evaluate.run_ray(
        tasks, spec, config, address=args.ray or None, num_workers=workers,
        gpus_per_worker=args.gpus_per_worker, cpus_per_worker=args.cpus_per_worker, log=info))


def _record(args, outcome, row, fingerprint, console) -> dict | None:
    """Writes a row's outcome: its file OUT/<id>.json and a log line, or the error on `console` and in the
    log. Returns the row's entry for the summary, or None when it failed."""
    lineno, rid = outcome.key, row["id"]
    if outcome.error is not None:
        console.print("[red]sequence-salience: error:[/red] " + plain(f"{args.batch}:{lineno} ({rid}): {outcome.error}"),
                      markup=True, highlight=False, soft_wrap=True)
        append_log(args.out, {"line": lineno, "id": rid, "status": "error", "error": outcome.error})
        return None
    meta = {"input": {k: row[k] for k in ("id", "case", "prompt", "system", "target", "chat")},
            "line": lineno, "fingerprint": fingerprint, "seconds": round(outcome.seconds, 3),
            "worker": outcome.worker, "attempts": outcome.attempts}
    obj = {"meta": meta, "evaluation": outcome.evaluation}
    atomic_write_text(os.path.join(args.out, rid + ".json"), json.dumps(obj, ensure_ascii=False, indent=1))
    append_log(args.out, {"line": lineno, "id": rid, "status": "done", "seconds": round(outcome.seconds, 3),
                          "file": rid + ".json", "attempts": outcome.attempts})
    return {"id": rid, "line": lineno, "evaluation": outcome.evaluation}


def evaluate_batch(args, methods) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel

    config = _checked_config(args, methods)
    lines, rows, failures = valid_rows(args.batch, args.out)
    settings = {"model": args.model, "dtype": args.dtype, "evaluation": config.fingerprint()}
    done_rows, todo = _rows_to_do(args, rows, settings, failures)  # done_rows: line -> saved row file (reused or new)
    skipped = len(done_rows)
    info(f"{len(lines)} row(s): {len(todo)} to do, {skipped} already done, {len(failures)} invalid.")

    by_line = {lineno: (row, fp) for lineno, row, fp in todo}
    tasks = [(lineno, row) for lineno, row, _ in todo]
    outcomes = _outcomes(args, config, tasks)  # the model loads here (serial), before the clock starts
    start = time.perf_counter()
    n_new = 0
    with outcomes as stream, progress_bar(time_left_label=True) as bar:
        task = bar.add_task("rows", total=len(tasks))
        try:
            for outcome in stream:
                entry = _record(args, outcome, *by_line[outcome.key], bar.console)
                if entry is None:
                    failures.append((outcome.key, outcome.error))
                else:
                    done_rows[outcome.key] = entry
                    n_new += 1
                n_fail = sum(1 for ln, _ in failures if ln in by_line)
                bar.update(task, advance=1, description=f"rows ({n_fail} failed)" if n_fail else "rows")
        except ss.SalienceError as e:  # a Ray worker could not start / load the model
            err(str(e))
            return EXIT_MODEL
    took = time.perf_counter() - start
    if n_new:
        info(f"{n_new} row(s) evaluated in {took:.1f} s ({60 * n_new / took:.2f} rows/min).")
    _write_evaluation_summary(args, settings, sorted(done_rows.items()), failures)
    info(f"Done: {n_new} evaluated, {skipped} skipped (already done), {len(failures)} failed; "
          f"summary in {os.path.join(args.out, 'summary.json')}, report in {os.path.join(args.out, 'report.html')}")
    for lineno, msg in sorted(failures):
        info(f"  line {lineno}: {msg}")
    return EXIT_ROWS_FAILED if failures else EXIT_OK


def _write_evaluation_summary(args, settings, done_rows, failures) -> None:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel
    from sequence_salience import evaluate  # pylint: disable=import-outside-toplevel

    rows = [r for _, r in done_rows]
    failures = sorted(failures)
    if not rows:
        info("No row was evaluated; no summary or report written.")
        return
    try:
        summary = evaluate.summarize([r["evaluation"] for r in rows],
                                     evaluate.SummaryConfig(n_boot=args.n_boot, reference=args.reference))
    except ss.SalienceError as e:  # e.g. saved rows with other methods than the new ones
        raise UsageError(f"cannot summarize the rows in {args.out}: {e}") from None
    obj = {"summary": summary, "rows": [{"id": r["id"], "line": r["line"]} for r in rows],
           "failures": [{"line": ln, "error": msg} for ln, msg in failures], "settings": settings,
           "batch": os.path.abspath(args.batch)}
    atomic_write_text(os.path.join(args.out, "summary.json"), json.dumps(obj, ensure_ascii=False, indent=1))
    page = evaluate.render_report(summary, rows, failures, title=f"Method evaluation: {os.path.basename(args.batch)}",
                                  settings=settings)
    atomic_write_text(os.path.join(args.out, "report.html"), page)
    for line in evaluate.summary_lines(summary):
        info(f"  {line}")


