"""`sequence-salience compare --model A --model-b B --prompt-a TEXT`: two models on one prompt
(sequence_salience.compare_models).

Each model formats the prompt with its own chat template, generates (unless --target-a/--target-b
are given) and explains its whole response; each answer is then scored under the other model (one
teacher-forced forward each). Prints both responses with their word diff, each answer's log p under
both models and the prompt segments whose salience differs most; writes --json / --html.
"""

from __future__ import annotations

from sequence_salience.cli.common import (
    EXIT_OK, EXIT_USAGE, UsageError, console, err, info, load_model, read_prompt_file, salience_config,
)


def _one_prompt(args) -> str:
    if args.prompt_b is not None or args.file_b is not None:
        raise UsageError("--model-b compares two models on ONE prompt; --prompt-b/--file-b give a second. "
                         "Fix: drop them (or drop --model-b to compare two prompts).")
    if args.same_response:
        raise UsageError("--same-response is for two prompts; with --model-b each model explains its own answer "
                         "and scores the other's. Fix: drop it.")
    if (args.prompt_a is None) == (args.file_a is None):
        raise UsageError("give the prompt with one of --prompt-a TEXT or --file-a PATH.")
    value = args.prompt_a if args.prompt_a is not None else read_prompt_file(args.file_a)
    if not value.strip():
        raise UsageError("--prompt-a is empty. Fix: give the prompt text.")
    return value


def summary(mc) -> str:
    """Plain-text report: both responses (diff marked), the two-way log p table, the top differences."""
    from sequence_salience.display import palette  # pylint: disable=import-outside-toplevel

    cmp, (la, lb) = mc.comparison, mc.labels

    def marked(side: str) -> str:
        out = []
        for k, seg in enumerate(cmp.responses.segments):
            text = cmp.responses.text(k, side)
            out.append(text if seg.kind == "equal" or not text else (f"[-{text}-]" if side == "a" else f"{{+{text}+}}"))
        return "".join(out)

    lines = [f"{cmp.method} · {cmp.granularity} · {la} vs {lb}",
             f"Response {la}: {marked('a')}", f"Response {lb}: {marked('b')}"]
    for owner, c in ((la, mc.cross_a), (lb, mc.cross_b)):
        lines.append(f"log p({owner}'s answer) under {la} = {c.under_a.total:.3f}; under {lb} = {c.under_b.total:.3f}"
                     f"; Δ = {c.delta:+.3f}")
    lines.append(f"Largest salience differences in the prompt (Δ = {lb} − {la}):")
    for k, d in cmp.top_changes(10):
        text = " ".join((cmp.prompts.text(k, "b") or cmp.prompts.text(k, "a")).split())
        lines.append(f"  {text[:40]!r:44s} Δ {palette.format_value(d)}")
    return "\n".join(lines)


def compare_two_models(args) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel

    prompt = _one_prompt(args)
    models = [load_model(args, flag) for flag in ("--model", "--model-b")]
    labels = (args.label_a, args.label_b) if (args.label_a, args.label_b) != ("A", "B") else None
    info("Generating and explaining with both models ...")
    try:
        mc = ss.compare_models(
            models[0], models[1], prompt, method=args.method, granularity=args.granularity, pattern=args.pattern,
            response_a=args.target_a or None, response_b=args.target_b or None, system=args.system or None,
            chat=False if args.raw else None, generation=ss.GenerationConfig(max_new_tokens=args.max_new_tokens),
            config=salience_config(args), labels=labels)
    except ss.SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    if args.json:
        mc.to_json(args.json, meta={"model_a": args.model, "model_b": args.model_b, "prompt": prompt,
                                    "system": args.system or "", "raw": bool(args.raw)})
        info(f"Wrote {args.json}")
    if args.html:
        mc.to_html(args.html)
        info(f"Wrote {args.html}")
    if not args.quiet:
        console().print(summary(mc), markup=False)
    return EXIT_OK
