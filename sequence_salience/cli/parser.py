"""The argument parser of the `sequence-salience` command (its usage text is the package docstring)."""

from __future__ import annotations

import argparse
import importlib

from sequence_salience.cli.calibrate import add_calibrate_parser
from sequence_salience.cli.common import explain_default, flag_dest, method_flags, method_help
from sequence_salience.cli.evaluation import EVALUATE_HELP
from sequence_salience.field_rules import CURVE_STEPS, MAX_NEW_TOKENS, FieldError, FieldRule


SHARE_HELP = ("write one standalone HTML file to share this view (opens offline): model, prompt, answer, method, "
              "granularity, the coloured map, the answer x prompt matrix with its numbers (a token method's needs "
              "--per-token; a segment method's is its one row, with its fit), the faithfulness table with "
              "--faithfulness, and a notebook cell that reproduces the result with the library")


def _granularities() -> tuple[str, ...]:
    from sequence_salience import aggregate  # pylint: disable=import-outside-toplevel

    return aggregate.GRANULARITIES


def add_flag(p: argparse.ArgumentParser, rule: FieldRule) -> None:
    """The flag of one field rule (sequence_salience/field_rules.py): its name, type, default, range and help
    from the one declaration; a value out of range is an argparse error naming the flag and the range."""

    def value(text: str) -> int | float:
        try:
            return rule.parse(text)
        except FieldError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    p.add_argument(rule.cli_flag, dest=flag_dest(rule.cli_flag), type=value, default=rule.default,
                   metavar="N", help=f"{rule.help} (default: {rule.default:g}; {rule.allowed()})")


def add_method_flags(p: argparse.ArgumentParser, kinds: tuple[str, ...], only: frozenset[str] | None = None,
                     counts: bool = True) -> None:
    """The flags of the registered methods of `kinds` (cli.common.method_flags), read from their records:
    each count's flag from its rule (`add_flag`) when `counts`, else each settings field whose metadata names a
    flag (its default, metavar and help from the field); `only`: just the settings fields named there."""
    import dataclasses  # pylint: disable=import-outside-toplevel

    for method, name, flag in method_flags(kinds):
        if only is not None and name not in only:
            continue
        if method.count is not None and name == method.count.name:
            if counts:
                add_flag(p, method.count)
        elif not counts:
            field = next(f for f in dataclasses.fields(method.settings) if f.name == name)
            p.add_argument(flag, dest=flag_dest(flag), default=field.default, type=field.metadata.get("type"),
                           metavar=field.metadata.get("metavar"), help=field.metadata.get("help"))


def _eval_counts() -> frozenset[str]:
    """The settings fields `evaluate` has flags for: the methods' counts EvalConfig holds."""
    import dataclasses  # pylint: disable=import-outside-toplevel

    from sequence_salience.evaluate import EvalConfig  # pylint: disable=import-outside-toplevel

    return frozenset(f.name for f in dataclasses.fields(EvalConfig))


def _removal_flag(p: argparse.ArgumentParser, what: str) -> None:
    from sequence_salience.methods.base import SEGMENT_REMOVALS  # pylint: disable=import-outside-toplevel

    p.add_argument("--removal", default=SEGMENT_REMOVALS[0], choices=SEGMENT_REMOVALS,
                   help=f"how a segment is removed ({what}): its tokens replaced by a space token (filler, "
                        "default: positions stay) or its text deleted")


def _display_flags(p: argparse.ArgumentParser) -> None:
    """The flags of what is shown: --method, --granularity, --pattern, --span, --top (explain and show)."""
    p.add_argument("--method", default=None,
                   help=f"salience method(s), comma-separated; the first is shown ({method_help()}; "
                        f"explain default: {explain_default()})")
    p.add_argument("--granularity", default=None, choices=_granularities(),
                   help="segments shown (default: word; sentence when a segment method runs: its values are "
                        "computed on these segments, and at token granularity it costs one forward per token)")
    p.add_argument("--pattern", default=None, help="regex for --granularity regex, e.g. '[^,;.]+'")
    p.add_argument("--span", default=None, metavar="T0:T1",
                   help="explain response tokens T0..T1-1 only (default: the whole response)")
    p.add_argument("--top", type=int, default=10, help="how many top segments to list (default: 10)")


def _device_flags(p: argparse.ArgumentParser) -> None:
    """--device and --dtype, as every command that loads a model takes them."""
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default: float32)")


def _add_explain(sub, doc: str, default_model: str) -> None:
    ex = sub.add_parser("explain", help="explain a prompt (or a JSONL file of prompts) with a model",
                        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog=doc[doc.index("Exit codes:"):])
    src = ex.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text (the user turn when the model has a chat template)")
    src.add_argument("--prompt-file", help="read the prompt from this UTF-8 text file ('-' for stdin)")
    src.add_argument("--batch", metavar="PROMPTS.jsonl", help="explain every row of a JSONL file (needs --out)")
    ex.add_argument("--model", default=default_model,
                    help="'default' (embedded SmolLM2-135M-Instruct), a local HF folder, a .gguf file or a Hub id")
    _device_flags(ex)
    ex.add_argument("--system", default=None, help="system prompt (needs a chat template)")
    ex.add_argument("--raw", action="store_true", help="do not apply the chat template; explain the raw text")
    ex.add_argument("--target", default=None, help="text to explain after the prompt (default: greedy generation)")
    add_flag(ex, MAX_NEW_TOKENS)
    add_method_flags(ex, ("token", "segment"))
    _removal_flag(ex, "by a segment method")
    add_method_flags(ex, ("token", "segment"), counts=False)
    _display_flags(ex)
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
    ex.add_argument("--share", default=None, metavar="PATH", help=SHARE_HELP)
    ex.add_argument("--faithfulness", action="store_true",
                    help="with --share: also run the faithfulness test of the methods on the same target (deletion "
                         "and insertion curves at --granularity, --steps points, --removal, against seeded random and "
                         "length orders) and put its AOPC table on the page")
    add_flag(ex, CURVE_STEPS)
    ex.add_argument("--out", default=None, metavar="DIR", help="--batch output folder")
    ex.add_argument("--force", action="store_true", help="--batch: redo rows that already have a result")
    ex.add_argument("--quiet", action="store_true", help="print no coloured text or table (files and errors only)")


def _add_compare(sub, default_model: str) -> None:
    cp = sub.add_parser("compare", help="what an edit of the prompt changed: both responses with their word diff, "
                                        "the old response's log p under the new prompt, the aligned salience",
                        description=importlib.import_module("sequence_salience.cli.compare").__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    cp.add_argument("--prompt-a", help="the original prompt (the user turn when the model has a chat template)")
    cp.add_argument("--file-a", help="read the original prompt from this UTF-8 file ('-' for stdin)")
    cp.add_argument("--prompt-b", help="the edited prompt")
    cp.add_argument("--file-b", help="read the edited prompt from this UTF-8 file")
    cp.add_argument("--model", default=default_model, help="as for explain (default: the embedded model)")
    cp.add_argument("--model-b", default=None,
                    help="a second model: compare --model and --model-b on ONE prompt (--prompt-a/--file-a): both "
                         "answers, both salience maps on one scale, each model's log p of the other's answer "
                         "(sequence_salience.compare_models; labels default to the models' names)")
    _device_flags(cp)
    cp.add_argument("--system", default=None, help="system prompt of both (needs a chat template)")
    cp.add_argument("--raw", action="store_true", help="do not apply the chat template")
    cp.add_argument("--target-a", default=None, help="response A to explain (default: greedy generation)")
    cp.add_argument("--target-b", default=None, help="response B to explain (default: greedy generation)")
    cp.add_argument("--same-response", action="store_true",
                    help="explain response A under prompt B too (the old answer's salience under the new prompt)")
    add_flag(cp, MAX_NEW_TOKENS)
    add_method_flags(cp, ("token",))
    cp.add_argument("--method", default=explain_default(),
                    help=f"one token salience method (default: {explain_default()}; {method_help(token_only=True)})")
    cp.add_argument("--granularity", default="word", choices=_granularities(), help="aligned segments (default: word)")
    cp.add_argument("--pattern", default=None, help="regex for --granularity regex")
    cp.add_argument("--label-a", default="A", help="name of side A in the output (default: A)")
    cp.add_argument("--label-b", default="B", help="name of side B in the output (default: B)")
    cp.add_argument("--json", default=None, metavar="PATH", help="write the comparison as JSON (both results included)")
    cp.add_argument("--html", default=None, metavar="PATH", help="write a self-contained HTML file")
    cp.add_argument("--quiet", action="store_true", help="print no summary (files and errors only)")


def _add_evaluate(sub, default_model: str) -> None:
    from sequence_salience.methods import DEFAULT_METHODS  # pylint: disable=import-outside-toplevel

    ev = sub.add_parser("evaluate", help="which method is faithful: faithfulness curves vs. baselines over a JSONL "
                                         "batch, with a summary and an HTML report",
                        description=EVALUATE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ev.add_argument("--batch", metavar="PROMPTS.jsonl", required=True, help="rows as for explain --batch")
    ev.add_argument("--out", metavar="DIR", required=True,
                    help="output folder: <row>.json, log.jsonl, summary.json, report.html")
    ev.add_argument("--model", default=default_model, help="as for explain (default: the embedded model)")
    _device_flags(ev)
    ev.add_argument("--raw", action="store_true", help="do not apply the chat template")
    ev.add_argument("--method", default=",".join(DEFAULT_METHODS),
                    help=f"methods compared, comma-separated (default: {','.join(DEFAULT_METHODS)}; "
                         f"{method_help()})")
    ev.add_argument("--granularity", default="sentence", choices=_granularities(),
                    help="segments removed (default: sentence)")
    ev.add_argument("--pattern", default=None, help="regex for --granularity regex")
    add_flag(ev, CURVE_STEPS)
    ev.add_argument("--n-random", type=int, default=None,
                    help="seeded random orders for the random baseline (default: the library's)")
    _removal_flag(ev, "by the curves and by a segment method")
    add_flag(ev, MAX_NEW_TOKENS)
    add_method_flags(ev, ("token",), only=_eval_counts())  # the counts EvalConfig holds
    ev.add_argument("--reduction", action="store_true", help="also report the input-reduction size per method")
    ev.add_argument("--ig-completeness", action="store_true",
                    help="also report integrated gradients' relative completeness error per row")
    ev.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the CIs (default: 2000)")
    ev.add_argument("--reference", default=None, metavar="METHOD",
                    help="the method every other is compared with, row by row (mean AOPC difference, bootstrap "
                         "CI, rows better / worse / tied; default: grad_norm when evaluated, else the first)")
    ev.add_argument("--no-upper-bound", action="store_true",
                    help="skip the search for the best order (the upper bound that says when a row cannot "
                         "decide; exact for <= 8 segments: at most 256 forward rows per row, greedy above)")
    ev.add_argument("--force", action="store_true", help="redo rows that already have a result")
    ev.add_argument("--ray", nargs="?", const="", default=None, metavar="auto|ADDRESS",
                    help="run the rows on Ray actors: no value = a local instance listening on loopback only, 'auto' = "
                         "the cluster started on this machine with `ray start`, or HOST:PORT (a cluster you start "
                         "is yours to secure: see the README) (needs the [ray] extra, Ray >=2.9,<3)")
    ev.add_argument("--workers", type=int, default=None,
                    help="--ray: worker actors (default: local 2, cluster: its GPUs / --gpus-per-worker, or CPUs)")
    ev.add_argument("--gpus-per-worker", type=float, default=0.0,
                    help="--ray: GPUs per worker (default 0: CPU workers; > 0 puts the model on cuda)")
    ev.add_argument("--cpus-per-worker", type=float, default=1.0, help="--ray: CPUs per worker (default: 1)")


def _add_show(sub) -> None:
    sh = sub.add_parser("show", help="render a saved result (JSON) in the terminal or as HTML, without a model")
    sh.add_argument("path", help="a JSON file written by explain --json / --batch or result.to_json")
    _display_flags(sh)
    sh.add_argument("--html", default=None, metavar="PATH", help="write a self-contained HTML file")
    sh.add_argument("--heatmap", default=None, metavar="PATH",
                    help="write a PNG heatmap (needs a result explained with --per-token)")
    sh.add_argument("--share", default=None, metavar="PATH", help=SHARE_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The `sequence-salience` parser: one sub-parser per command (_add_explain, _add_compare, _add_evaluate,
    _add_show, calibrate's add_calibrate_parser)."""
    from sequence_salience import DEFAULT_MODEL  # pylint: disable=import-outside-toplevel

    doc = importlib.import_module("sequence_salience.cli").__doc__
    parser = argparse.ArgumentParser(
        prog="sequence-salience", description=doc.split("\n\n")[0],
        epilog=doc[doc.index("Exit codes:"):], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{explain,compare,evaluate,show,calibrate}")
    _add_explain(sub, doc, DEFAULT_MODEL)
    _add_compare(sub, DEFAULT_MODEL)
    _add_evaluate(sub, DEFAULT_MODEL)
    _add_show(sub)
    add_calibrate_parser(sub, DEFAULT_MODEL)
    return parser

