"""`sequence-salience calibrate`: fit learned attention attribution's estimator for a model.

    sequence-salience calibrate --model /path/to/model --out calib/ [--prompts 40] [--seed 0]
    sequence-salience explain --model /path/to/model --prompt-file p.txt --method attention_attribution \\
        --attention-estimator calib/estimator.npz

Generates --prompts training prompts (four kinds: notes + question, principles, few-shot, chain of thought;
--min-tokens..--max-tokens long, from --seed; sequence_salience/attention/prompts.py), measures each by exact
leave one segment out and --masks random ablations (forward passes only) with the model's per-head attention to
each segment, and fits the linear estimator (ridge, cross-validated; sequence_salience/attention/estimator.py).
Each prompt's measurements are cached in OUT/prompts/ as they finish: an interrupted run resumes where it stopped,
and a rerun with more prompts measures only the new ones. The same seed and recipe give the same weights (CPU).
Writes OUT/estimator.npz. Cost: one forward per segment and per mask, per prompt; the default recipe took about
20 minutes on a shared 2-core CPU for SmolLM2-135M (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import pathlib
import time

from sequence_salience.cli.common import EXIT_OK, UsageError, info, load_model

HELP = __doc__


def add_calibrate_parser(sub, default_model: str) -> None:
    """The `calibrate` subcommand's flags (defaults: the recipe of the shipped estimator, CalibrationConfig)."""
    from sequence_salience.attention.estimator import FEATURE_BLOCKS  # pylint: disable=import-outside-toplevel
    from sequence_salience.calibration import CalibrationConfig  # pylint: disable=import-outside-toplevel
    from sequence_salience.methods.base import SEGMENT_REMOVALS  # pylint: disable=import-outside-toplevel

    d = CalibrationConfig()
    cal = sub.add_parser("calibrate", help="fit learned attention attribution's estimator for a model (its own "
                                           "ablations of generated prompts; resumable, seeded)",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    cal.add_argument("--model", default=default_model, help="as for explain (default: the embedded model)")
    cal.add_argument("--out", required=True, metavar="DIR",
                     help="output folder: estimator.npz and prompts/ (the cached measurements a rerun reuses)")
    cal.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    cal.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default: float32)")
    cal.add_argument("--prompts", type=int, default=d.prompts, help=f"training prompts (default: {d.prompts})")
    cal.add_argument("--min-tokens", type=int, default=d.min_tokens,
                     help=f"shortest prompt, in the model's tokens (default: {d.min_tokens})")
    cal.add_argument("--max-tokens", type=int, default=d.max_tokens,
                     help=f"longest prompt (default: {d.max_tokens}); cost grows with the square of the length")
    cal.add_argument("--sentence-max-tokens", type=int, default=d.sentence_max_tokens,
                     help=f"prompts up to this long are segmented by sentence, longer by paragraph (default: "
                          f"{d.sentence_max_tokens})")
    cal.add_argument("--masks", type=int, default=d.masks,
                     help=f"random ablations per prompt besides leave-one-out (default: {d.masks})")
    cal.add_argument("--removal", default=d.removal, choices=SEGMENT_REMOVALS, help="how a segment is removed")
    cal.add_argument("--seed", type=int, default=d.seed, help=f"seed of the prompts and masks (default: {d.seed})")
    cal.add_argument("--features", nargs="+", default=list(d.features), choices=FEATURE_BLOCKS,
                     help=f"feature blocks the estimator reads (default: {' '.join(d.features)}): span = the target "
                          "span's attention per head, share = the same divided among the segments, question = the "
                          "last segment's own attention, position = last segment and token share")


def calibration_config(args):
    from sequence_salience.calibration import CalibrationConfig  # pylint: disable=import-outside-toplevel

    if args.prompts < 2:
        raise UsageError(f"--prompts {args.prompts}: the fit needs at least 2 prompts (5 or more to cross-validate).")
    if not 10 <= args.min_tokens <= args.max_tokens:
        raise UsageError(f"--min-tokens {args.min_tokens} --max-tokens {args.max_tokens}: give 10 <= min <= max.")
    if args.masks < 0:
        raise UsageError(f"--masks {args.masks}: give 0 or more.")
    return CalibrationConfig(prompts=args.prompts, min_tokens=args.min_tokens, max_tokens=args.max_tokens,
                             sentence_max_tokens=args.sentence_max_tokens, masks=args.masks, removal=args.removal,
                             seed=args.seed, features=tuple(dict.fromkeys(args.features)))


def calibrate_command(args) -> int:
    """Runs `calibrate`; prints one line per prompt (cached ones say so) and the fit."""
    from sequence_salience import SalienceError  # pylint: disable=import-outside-toplevel
    from sequence_salience.attention import attention_shape  # pylint: disable=import-outside-toplevel
    from sequence_salience.calibration import ESTIMATOR_FILE, calibrate  # pylint: disable=import-outside-toplevel

    config = calibration_config(args)
    lm = load_model(args)
    try:
        attention_shape(lm.model)
    except SalienceError as e:
        raise UsageError(str(e)) from None
    start = time.perf_counter()

    def progress(done, total, item, granularity, seconds, cached):
        state = "cached" if cached else f"{seconds:.1f} s"
        info(f"[{done}/{total}] {item.id} ({item.kind}, by {granularity}): {state}; "
             f"{time.perf_counter() - start:.0f} s so far")

    try:
        est = calibrate(lm, args.out, config, progress)
    except SalienceError as e:
        raise UsageError(str(e)) from None
    path = pathlib.Path(args.out) / ESTIMATOR_FILE
    info(f"Wrote {path}: {est.shape.n_layers} layers x {est.shape.n_heads} heads, ridge alpha {est.alpha:g}, "
         f"cross-validated R\u00b2 of the ablation effects {est.quality['cv_r2']:.2f} over "
         f"{int(est.quality['prompts'])} prompts ({int(est.quality['rows'])} ablations); training hash "
         f"{est.training_hash[:16]}.")
    info(f"Use it: sequence-salience explain --model {args.model} --method attention_attribution "
         f"--attention-estimator {path} ...")
    return EXIT_OK
