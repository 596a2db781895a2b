"""Helpers every subcommand of the `sequence-salience` command shares: exit codes, usage
errors, flag parsing, messages, the model load and the progress bar."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

EXIT_OK = 0
EXIT_ROWS_FAILED = 1
EXIT_USAGE = 2
EXIT_MODEL = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A problem with the command line or its input files (exit code 2)."""


class ModelLoadError(Exception):
    """A model named on the command line could not be loaded (exit code 3; main() reports it)."""



def parse_span(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or int(m.group(1)) >= int(m.group(2)):
        raise UsageError(f"--span {text!r}: write T0:T1 with T0 < T1, e.g. --span 0:3 (response token indices).")
    return int(m.group(1)), int(m.group(2))


def explain_default() -> str:
    """The method `explain` shows when --method is not given: the registry's first (gradient norm),
    which is also the browser module's first (lit_app/schema/method_registry.py keeps the core's order)."""
    from sequence_salience.methods import registry_json  # pylint: disable=import-outside-toplevel

    return registry_json()[0]["name"]


def parse_methods(text: str | None) -> tuple[str, ...]:
    """The --method names, each a token or a segment method of the registry (else UsageError)."""
    from sequence_salience import SalienceError, field_rules  # pylint: disable=import-outside-toplevel
    from sequence_salience.methods import get_any_method  # pylint: disable=import-outside-toplevel

    names = tuple(m.strip() for m in (text or explain_default()).split(",") if m.strip())
    if not names:
        raise UsageError(f"--method is empty. Fix: e.g. --method {explain_default()}.")
    for name in names:
        try:
            get_any_method(name)
        except SalienceError as e:
            raise UsageError(f"--method: {e}") from None
    try:
        return field_rules.distinct_names(names)
    except field_rules.FieldError as e:
        raise UsageError(f"--method: {e}.") from None


def segment_methods(methods) -> list[str]:
    """The segment methods (values per segment, from ablations) among `methods`."""
    from sequence_salience.methods import is_segment_method  # pylint: disable=import-outside-toplevel

    return [m for m in methods if is_segment_method(m)]


def method_help(token_only: bool = False) -> str:
    """The --method choices for a help text, read from the registry: token methods, then segment
    methods with their cost (one forward per segment or ablation; at token granularity, per token)."""
    from sequence_salience.methods import registry_json  # pylint: disable=import-outside-toplevel

    token = ", ".join(m["name"] for m in registry_json(("token",)))
    if token_only:
        return f"one of {token}"
    segment = "; ".join(f"{m['name']}: {m['cost_unit']}" for m in registry_json(("segment",)))
    return (f"token methods: {token}; segment methods (a value per segment of --granularity, from forward "
            f"passes over ablated prompts; at token granularity one per token, the slowest): {segment}")


def flag_dest(flag: str) -> str:
    """argparse's attribute of a long flag: "--ig-steps" -> "ig_steps"."""
    return flag[2:].replace("-", "_")


def method_flags(kinds: tuple[str, ...]) -> list[tuple[Any, str, str]]:
    """(record, settings field, flag) of every registered method of `kinds` ("token", "segment"), in display
    order: each counted method's count (its rule's flag), then each settings field whose metadata names a
    "flag" (methods/base.py SalienceMethod.settings). The flags, configs and batch fingerprint all read this."""
    from sequence_salience.methods import all_records, flagged_settings  # pylint: disable=import-outside-toplevel

    counts = [(m, m.count.name, m.count.cli_flag) for m in all_records() if m.kind in kinds and m.count is not None]
    return counts + [(m, f.name, f.metadata["flag"]) for m, f in flagged_settings(kinds)]


def flag_settings(args, kinds: tuple[str, ...]) -> dict[str, Any]:
    """{settings field: value} of the methods' flags of `kinds` that `args` has (a subcommand may have fewer)."""
    return {name: getattr(args, flag_dest(flag)) for _, name, flag in method_flags(kinds)
            if hasattr(args, flag_dest(flag))}


def salience_config(args):
    """The SalienceConfig of the token methods' flags (their counts: --ig-steps, ...)."""
    from sequence_salience import SalienceConfig  # pylint: disable=import-outside-toplevel

    return SalienceConfig(**flag_settings(args, ("token",)))


def ablation_config(args):
    """The AblationConfig of the segment methods' flags (--removal; their counts and settings: --ablations, ...)."""
    from sequence_salience.methods import AblationConfig  # pylint: disable=import-outside-toplevel

    return AblationConfig(removal=args.removal, **flag_settings(args, ("segment",)))


def read_prompt_file(path: str) -> str:
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


def console(stderr: bool = False):
    from rich.console import Console  # pylint: disable=import-outside-toplevel

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


@contextlib.contextmanager
def reading_saved(path: str) -> Iterator[None]:
    """Turns what a saved result edited into something explain does not write (a count that is a
    string, a text that is a number, JSON nested too deeply) raises while it is loaded or drawn into a SalienceError
    naming the file and the fix; SalienceErrors pass as they are."""
    from sequence_salience.errors import SalienceError  # pylint: disable=import-outside-toplevel

    try:
        yield
    except SalienceError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError) as e:
        detail = (str(e).strip().splitlines() or [""])[0][:200]
        raise SalienceError(f"{path} is not a result as `sequence-salience explain` writes it ({type(e).__name__}: "
                            f"{detail}). Fix: delete it and explain the row again (or rerun the batch with "
                            "--force).") from None


def plain(text: str) -> str:
    """`text` for a rich console that reads markup: its [tags] printed as they are (a path or message
    holding "[/x]" would otherwise raise rich's MarkupError)."""
    from rich.markup import escape  # pylint: disable=import-outside-toplevel

    return escape(text)


def err(msg: str) -> None:
    print(f"sequence-salience: error: {msg}", file=sys.stderr, flush=True)


def info(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_model(args, flag: str = "--model"):
    """Loads the model the flag names (its dest: --model-b -> args.model_b); ModelLoadError when it fails."""
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel

    spec = getattr(args, flag.lstrip("-").replace("-", "_"))
    info(f"Loading model {spec!r} ({flag}) ...")
    start = time.perf_counter()
    try:
        lm = ss.load_model(spec, device=args.device, dtype=args.dtype, log=info)
    except ss.SalienceError as e:
        raise ModelLoadError(f"cannot load {flag} {spec!r}: {e}") from e
    info(f"Model ready after {time.perf_counter() - start:.1f} s.")
    return lm


def run_settings(args, methods: tuple[str, ...]) -> dict[str, Any]:
    """What, besides the row, decides a result: a batch row is redone when any of it changes.

    A method's flags (its count, its other flagged settings: method_flags) count only when the method runs,
    under their settings field (so rows saved by other methods keep their fingerprint); the segment methods'
    segmentation and removal when one of them runs."""
    settings = {"model": args.model, "dtype": args.dtype, "methods": list(methods),
                "max_new_tokens": args.max_new_tokens, "raw": bool(args.raw)}
    if segment_methods(methods):
        settings["segments"] = {"granularity": args.granularity, "pattern": args.pattern, "removal": args.removal}
    for method, name, flag in method_flags(("token", "segment")):
        if method.name in methods and hasattr(args, flag_dest(flag)):
            settings[name] = getattr(args, flag_dest(flag))
    return settings


def check_pattern_flags(args) -> None:
    """UsageError unless --granularity regex has a --pattern and the pattern is in the shared dialect."""
    from sequence_salience import SalienceError, aggregate  # pylint: disable=import-outside-toplevel

    if args.granularity == "regex" and not args.pattern:
        raise UsageError("--granularity regex needs --pattern, e.g. --pattern '[^,;.]+'.")
    if args.pattern:
        try:
            aggregate.compile_pattern(args.pattern)
        except SalienceError as e:
            raise UsageError(f"--pattern: {e}") from None


def progress_bar(time_left_label: bool = False):
    """The rows progress bar on stderr: description, bar, n/total, elapsed, (left) remaining."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn  # pylint: disable=import-outside-toplevel

    left = (TextColumn("left"),) if time_left_label else ()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    *left, TimeRemainingColumn(), console=console(stderr=True), transient=False)
