"""The `sequence-salience` command: explain one prompt, or a JSONL file of prompts, from a shell.

    sequence-salience explain --prompt "What is the capital of France?"
    sequence-salience explain --prompt-file prompt.txt --system "Be brief." --target " Paris." \\
        --method grad_x_input --granularity sentence --top 5 --html out.html --json out.json
    sequence-salience explain --batch prompts.jsonl --out results/ [--html]
    sequence-salience explain --prompt "..." --per-token --json full.json --heatmap map.png
    sequence-salience explain --prompt "..." --per-token --share view.html   (a page to share, with a notebook cell)
    sequence-salience explain --prompt-file p.txt --method leave_one_out --granularity sentence [--removal delete]
    sequence-salience explain --prompt-file p.txt --method ablation_surrogate --ablations 32 --html s.html
    sequence-salience compare --prompt-a "Alice has 3 apples ..." --prompt-b "Alice has 4 apples ..." --html c.html
    sequence-salience compare --model default --model-b /path/to/model --prompt-a "..." --json m.json --html m.html
    sequence-salience show results/00003.json --granularity sentence [--html out.html]
    sequence-salience evaluate --batch prompts.jsonl --out eval/ [--ray [auto|ADDRESS]]
    sequence-salience explain --prompt-file p.txt --method attention_attribution --granularity paragraph
    sequence-salience calibrate --model /path/to/model --out calib/   (then --attention-estimator calib/estimator.npz)

`explain` loads the model, generates the greedy response (unless --target is
given), computes the salience of the whole response (or of --span T0:T1 of its
tokens) directly -- ONE forward + backward for grad_norm and grad_x_input, one
batch of steps for integrated_gradients / smooth_grad -- and prints the coloured
prompt, the response and a table of the top segments. The per-token matrices
(every response token's own salience: one backward per token, minutes on a CPU)
are computed only when an output needs them: --per-token (then --json holds
them and `show` can re-render any span) or --heatmap. Segment methods measure
the --granularity segments (default then: sentence) by removing them, with
forward passes only over the cached prefix: leave_one_out each segment alone
(one forward per segment), ablation_surrogate random subsets (one forward per
random ablation); they print the fit of the surrogate and
the forward work, and their values are shown at that granularity only. `--batch` reads one JSON object per line
({"prompt": ..., "system": ..., "target": ..., "chat": ..., "id": ...}; only
"prompt" is required), writes OUT/<id or line number>.json (and .html with
--html) per row, appends one line per row to OUT/log.jsonl, shows a progress
bar, reports a bad row with its line number and goes on. Rerunning the same
command skips rows whose result file already holds the same input and
settings (resumable; files are written atomically, so an interrupted run
leaves no half-written result); a row saved with matrices also answers a run
without --per-token, a row saved without them is redone when matrices are needed
or another span is asked for. `show` re-renders a saved result without a model.
`compare` explains an original and an edited prompt and shows what the edit
changed: both responses with their word diff, the log p of the original
response under the edited prompt (one teacher-forced forward) and the aligned
prompt salience on one scale, with the difference (see `compare --help`). With
`--model-b` it compares two models on one prompt instead: both answers, both maps on
one scale, and each model's log p of the other's answer (compare_models).
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

import sys
from collections.abc import Sequence

from sequence_salience.cli.batch import LOG_NAME, explain_batch, parse_row, reusable
from sequence_salience.cli.common import (
    EXIT_INTERRUPTED, EXIT_MODEL, EXIT_OK, EXIT_ROWS_FAILED, EXIT_USAGE, ModelLoadError, UsageError,
    check_pattern_flags, err, explain_default, parse_methods, parse_span, segment_methods,
)
from sequence_salience.cli.calibrate import calibrate_command
from sequence_salience.cli.compare import compare_prompts
from sequence_salience.cli.compare_models import compare_two_models
from sequence_salience.cli.evaluation import evaluate_batch
from sequence_salience.cli.explain import (
    check_renderable, check_segment_flags, explain_one, explain_single, needs_matrices, show,
)
from sequence_salience.cli.parser import build_parser

__all__ = [
    "EXIT_INTERRUPTED", "EXIT_MODEL", "EXIT_OK", "EXIT_ROWS_FAILED", "EXIT_USAGE", "LOG_NAME", "UsageError",
    "build_parser", "check_renderable", "explain_one", "main", "needs_matrices", "parse_row", "reusable", "run",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with 2 on bad flags
    try:
        if args.command == "calibrate":
            return calibrate_command(args)
        if args.command == "evaluate":
            return evaluate_batch(args, parse_methods(args.method))
        if args.command == "compare":
            if len(parse_methods(args.method)) != 1:
                raise UsageError(f"--method {args.method!r}: compare shows one method. Fix: pass one name.")
            if segment_methods(parse_methods(args.method)):
                raise UsageError(f"--method {args.method}: compare aligns token salience, and this is a segment "
                                 f"method (values on one segmentation). Fix: compare with a token method, e.g. "
                                 f"--method {explain_default()}, or run `explain --method {args.method}` on each "
                                 "prompt.")
            check_pattern_flags(args)
            return compare_two_models(args) if args.model_b else compare_prompts(args)
        span = parse_span(args.span)
        if args.top < 0:
            raise UsageError(f"--top {args.top}: give 0 or more.")
        check_pattern_flags(args)
        if args.command == "show":
            return show(args, span)
        methods = parse_methods(args.method)
        if args.granularity is None:  # a segment method's values are computed on the segments shown
            args.granularity = "sentence" if segment_methods(methods) else "word"
        check_segment_flags(args, methods)
        if args.batch is not None:
            return explain_batch(args, methods, span)
        return explain_single(args, methods, span)
    except UsageError as e:
        err(str(e))
        return EXIT_USAGE
    except ModelLoadError as e:
        err(str(e))
        return EXIT_MODEL
    except KeyboardInterrupt:
        err("interrupted; finished results are kept (a --batch rerun resumes).")
        return EXIT_INTERRUPTED


def run() -> None:
    """Console-script entry point (`sequence-salience`)."""
    sys.exit(main())


