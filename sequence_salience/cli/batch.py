"""`sequence-salience explain --batch`: one result file per JSONL row, resumable, with a log.

The row parsing and the log are shared with `evaluate` (cli/evaluation.py).
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from sequence_salience.cli.common import (
    EXIT_OK,
    EXIT_ROWS_FAILED,
    UsageError,
    ablation_config,
    err,
    info,
    load_model,
    plain,
    progress_bar,
    reading_saved,
    run_settings,
    salience_config,
)
from sequence_salience.cli.explain import SEGMENTS_KEY, explain_one, needs_matrices, saved_segments
from sequence_salience.field_rules import MAX_NEW_TOKENS, FieldError
from sequence_salience.files import atomic_write_text

LOG_NAME = "log.jsonl"
_ROW_KEYS = ("prompt", "system", "target", "chat", "id", "case", "max_new_tokens")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def parse_row(line: str, lineno: int) -> dict[str, Any]:
    """One JSONL row -> {"prompt", "system", "target", "chat", "id", "max_new_tokens"}; UsageError names the problem.

    "max_new_tokens": the row's own response budget (field_rules.MAX_NEW_TOKENS's range), used instead of
    --max_new_tokens for that row (`row_budget`); None when the row has none."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UsageError(f"not valid JSON ({e.msg} at column {e.colno}); write one object per line, "
                         'e.g. {"prompt": "..."}') from None
    except RecursionError:  # Python's parser gives up on a few thousand nested [ or {: this row fails, not the run
        raise UsageError("JSON nested too deeply to read; a row is one flat object, "
                         'e.g. {"prompt": "...", "target": "..."}') from None
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
    for key in ("prompt", "system", "target", "case"):
        _check_text(key, row[key])
    budget = obj.get(MAX_NEW_TOKENS.name)
    if budget is not None:
        try:
            budget = int(MAX_NEW_TOKENS.parse(budget))
        except FieldError as e:
            raise UsageError(f'field "{MAX_NEW_TOKENS.name}" is {e}') from None
    row[MAX_NEW_TOKENS.name] = budget
    rid = obj.get("id")
    if rid is None:
        row["id"] = f"{lineno:05d}"
    else:
        rid = str(rid) if isinstance(rid, int) and not isinstance(rid, bool) else rid
        if not isinstance(rid, str) or not _ID_RE.match(rid):
            raise UsageError(f'field "id" {rid!r} must be letters, digits, "_", "-" or "." (it names the output file)')
        row["id"] = rid
    return row


def _check_text(key: str, value: str) -> None:
    """UsageError for a string JSON decoded with a lone surrogate ("\\ud800": half of a UTF-16 pair, not a
    character): no tokenizer or UTF-8 file takes it, and it stopped the whole batch (issue 43)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UsageError(f'field "{key}" holds a lone surrogate \\u{ord(value[e.start]):04x} at character {e.start}'
                         " (half of a UTF-16 pair, not a character); fix the row's escapes, e.g. \\ud83d\\ude00"
                         " for one emoji") from None


def row_budget(row: dict[str, Any], default: int) -> int:
    """The row's own `max_new_tokens` (e.g. the shipped chain-of-thought case's), else `default` (--max_new_tokens)."""
    return row.get(MAX_NEW_TOKENS.name) or default


def row_fingerprint(row: dict[str, Any]) -> dict[str, Any]:
    """What of a row decides its result: its texts and chat flag, and its own budget when it has one (so
    rows without one keep the fingerprint they were saved with)."""
    out = {k: row[k] for k in ("prompt", "system", "target", "chat")}
    if row.get(MAX_NEW_TOKENS.name) is not None:
        out[MAX_NEW_TOKENS.name] = row[MAX_NEW_TOKENS.name]
    return out


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

    saved = saved_meta(path, "result")
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


def _open_log(out_dir: str) -> int:
    """OUT/log.jsonl opened for appending (created if missing), never through a symbolic link.

    The other files in OUT are written by atomic rename (files.py), which replaces a link instead
    of writing through it; the log is appended to, so a link there would send it elsewhere.
    """
    path = os.path.join(out_dir, LOG_NAME)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        if os.path.islink(path):  # also where O_NOFOLLOW does not exist
            raise OSError(errno.ELOOP, "a symbolic link")
        return os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            target = os.readlink(path) if os.path.islink(path) else "?"
            raise UsageError(f"--out {out_dir}: {LOG_NAME} there is a symbolic link (to {target}); the batch tools "
                             "do not write through links. Fix: remove the link, or give another --out.") from None
        raise UsageError(f"--out {out_dir}: cannot write {LOG_NAME} there ({e.strerror}).") from None


def append_log(out_dir: str, entry: dict) -> None:
    entry = {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **entry}
    with os.fdopen(_open_log(out_dir), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        f.flush()


def valid_rows(batch: str, out: str) -> tuple[list[tuple[int, str]], list[tuple[int, dict]], list[tuple[int, str]]]:
    """Reads the batch file and creates OUT; returns (lines, valid rows, failures).

    Every row is validated first: a bad row (or a repeated id) is reported with its line number,
    logged to OUT/log.jsonl and skipped.
    """
    lines = _read_batch(batch)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create it ({e.strerror}).") from None
    os.close(_open_log(out))  # a linked or unwritable log stops the run before any row
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
            err(f"{batch}:{lineno}: {e}")
            append_log(out, {"line": lineno, "status": "error", "error": str(e)})
    return lines, rows, failures


def saved_meta(path: str, body: str) -> tuple[dict, dict] | None:
    """(whole object, its "meta") of a saved row file that has `body` and a meta dict, else None."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, or nested too deeply: not done
        return None
    meta = obj.get("meta") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or body not in obj:
        return None
    return obj, meta


def _check_batch_flags(args) -> None:
    """UsageError naming the fix for each flag that does not go with --batch."""
    if not args.out:
        raise UsageError("--batch needs --out DIR (where the per-row results go).")
    if args.html not in (None, ""):
        raise UsageError("With --batch, --html takes no PATH: it writes OUT/<row>.html next to each JSON.")
    if args.json is not None:
        raise UsageError("With --batch, results are always JSON in --out; drop --json.")
    if args.system is not None or args.target is not None:
        raise UsageError("With --batch, the system prompt and target come from each row; drop --system/--target.")
    if args.share is not None:
        raise UsageError("--share writes one page for one prompt. Fix: run the batch, then "
                         "`sequence-salience show OUT/<id>.json --share PATH` for the rows you want.")
    if args.heatmap is not None:
        raise UsageError("--heatmap writes one PNG for one prompt. Fix: run the batch with --per-token, then "
                         "`sequence-salience show OUT/<id>.json --heatmap PATH` for the rows you want.")


def _batch_todo(args, rows, settings: dict, per_token: bool, methods, span) -> tuple[list, int]:
    """(the (line, row, fingerprint, "explain" | "html-only") to do, the rows already done): a row whose saved
    result has the same fingerprint is skipped (unless --force), or only gets its missing HTML page."""
    todo, skipped = [], 0
    for lineno, row in rows:
        fingerprint = {"row": row_fingerprint(row), "settings": settings, "matrices": per_token}
        json_path = os.path.join(args.out, row["id"] + ".json")
        if not args.force and _existing_result(json_path, fingerprint, methods, span):
            skipped += 1
            if args.html == "" and not os.path.exists(os.path.join(args.out, row["id"] + ".html")):
                todo.append((lineno, row, fingerprint, "html-only"))
            else:
                append_log(args.out, {"line": lineno, "id": row["id"], "status": "skipped"})
            continue
        todo.append((lineno, row, fingerprint, "explain"))
    return todo, skipped


def _row_html(args, result, methods, span, lineno: int, rid: str, segments) -> str:
    """The row's self-contained HTML page."""
    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    return display.render_html(result, methods[0], args.granularity, span, pattern=args.pattern, top=args.top,
                               title=f"{os.path.basename(args.batch)} line {lineno} ({rid})", segments=segments)


def _explain_row(args, lm, methods, span, per_token: bool, settings: dict, lineno: int, row: dict, fingerprint: dict,
                 progress) -> None:
    """Explains one row: OUT/<id>.json (written last: its presence marks the row as done), and with --html its
    page."""
    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    rid = row["id"]
    result, generated, segments = explain_one(
        lm, row["prompt"], row["system"], row["target"] or None, False if args.raw else row["chat"], methods,
        salience_config(args), row_budget(row, args.max_new_tokens), progress, span=span, per_token=per_token,
        segments=(args.granularity, args.pattern, ablation_config(args)))
    meta = {"input": {k: row[k] for k in ("id", "case", "prompt", "system", "target", "chat")},
            "line": lineno, "fingerprint": fingerprint, "settings": settings, "generated": generated,
            "matrices": per_token}
    if segments:
        meta[SEGMENTS_KEY] = [v.to_json() for v in segments]
    if args.html == "":
        atomic_write_text(os.path.join(args.out, rid + ".html"), _row_html(args, result, methods, span, lineno, rid,
                                                                           segments))
    display.to_json(result, os.path.join(args.out, rid + ".json"), meta)  # last: its presence marks the row as done


def _html_only(args, methods, span, lineno: int, rid: str) -> None:
    """Writes the page of a row already explained, from its saved result."""
    from sequence_salience import display  # pylint: disable=import-outside-toplevel

    json_path = os.path.join(args.out, rid + ".json")
    with reading_saved(json_path):
        result, saved = display.load(json_path, with_meta=True)
        page = _row_html(args, result, methods, span, lineno, rid, saved_segments(saved))
    atomic_write_text(os.path.join(args.out, rid + ".html"), page)


def explain_batch(args, methods, span) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel

    _check_batch_flags(args)
    per_token = needs_matrices(args)
    lines, rows, failures = valid_rows(args.batch, args.out)
    settings = run_settings(args, methods)
    todo, skipped = _batch_todo(args, rows, settings, per_token, methods, span)
    info(f"{len(lines)} row(s): {len(todo)} to do, {skipped} already done, {len(failures)} invalid.")
    lm = load_model(args) if any(kind == "explain" for *_, kind in todo) else None

    done = 0
    with progress_bar() as bar:
        task = bar.add_task("rows", total=len(todo))
        for lineno, row, fingerprint, kind in todo:
            rid = row["id"]
            start = time.perf_counter()
            bar.update(task, description=f"line {lineno} ({rid})")

            def progress(method, d, total, _line=lineno, _rid=rid):
                bar.update(task, description=f"line {_line} ({_rid}): {method} {d}/{total}")

            try:
                if kind == "html-only":
                    _html_only(args, methods, span, lineno, rid)
                else:
                    _explain_row(args, lm, methods, span, per_token, settings, lineno, row, fingerprint, progress)
            except ss.SalienceError as e:
                failures.append((lineno, str(e)))
                bar.console.print(f"[red]sequence-salience: error:[/red] {plain(f'{args.batch}:{lineno} ({rid}): {e}')}",
                                  markup=True, highlight=False, soft_wrap=True)
                append_log(args.out, {"line": lineno, "id": rid, "status": "error", "error": str(e)})
            else:
                done += kind == "explain"
                append_log(args.out, {"line": lineno, "id": rid, "status": "done" if kind == "explain" else "html",
                                       "seconds": round(time.perf_counter() - start, 3), "file": rid + ".json"})
            bar.advance(task)
        bar.update(task, description="rows")

    info(f"Done: {done} explained, {skipped} skipped (already done), {len(failures)} failed; results in {args.out}")
    for lineno, msg in sorted(failures):
        info(f"  line {lineno}: {msg}")
    return EXIT_ROWS_FAILED if failures else EXIT_OK
