"""`sequence-salience compare`: what an edit of the prompt changed (sequence_salience.compare).

Generates both responses (unless --target-a/--target-b are given), explains each whole response
(one forward + backward for the gradient methods, as `explain`), and runs one teacher-forced
forward for A's response under prompt B; prints the responses with their word diff, the Δ log p of
A's response and the prompt segments whose salience changed most; writes --json / --html.
"""

from __future__ import annotations

from sequence_salience.cli.common import (
    EXIT_OK, EXIT_USAGE, UsageError, console, err, info, load_model, read_prompt_file, salience_config,
)
from sequence_salience.files import atomic_write_text


def _prompt(text: str | None, path: str | None, flag: str) -> str:
    if text is None and path is None:
        raise UsageError(f"give --prompt-{flag} TEXT or --file-{flag} PATH.")
    if text is not None and path is not None:
        raise UsageError(f"--prompt-{flag} and --file-{flag} both give prompt {flag.upper()}. Fix: pass one of them.")
    value = text if text is not None else read_prompt_file(path)
    if not value.strip():
        raise UsageError(f"--prompt-{flag} is empty. Fix: give the prompt text.")
    return value


def _summary(cmp) -> str:
    """Plain-text report: the responses (diff marked [-deleted-] {+inserted+}), Δ log p, top changes."""
    from sequence_salience.display import palette  # pylint: disable=import-outside-toplevel

    la, lb = cmp.labels

    def marked(side: str) -> str:
        out = []
        for k, seg in enumerate(cmp.responses.segments):
            text = cmp.responses.text(k, side)
            if seg.kind == "equal" or not text:
                out.append(text)
            else:
                out.append(f"[-{text}-]" if side == "a" else f"{{+{text}+}}")
        return "".join(out)

    lines = [f"{cmp.method} · {cmp.granularity} · {la} vs {lb}",
             f"Response {la}: {marked('a')}", f"Response {lb}: {marked('b')}",
             "The responses are the same." if not cmp.responses.changed else "The responses differ."]
    if cmp.cross is not None:
        c = cmp.cross
        lines.append(f"log p({la}'s response | {la}) = {c.under_a.total:.3f}; | {lb} = {c.under_b.total:.3f}; "
                     f"Δ log p = {c.delta:+.3f}")
    lines.append("Largest salience changes in the prompt (Δ = " + lb + " − " + la + "):")
    for k, d in cmp.top_changes(10):
        text = " ".join((cmp.prompts.text(k, "b") or cmp.prompts.text(k, "a")).split())
        lines.append(f"  {cmp.prompts.segments[k].kind:8s} {text[:40]!r:44s} Δ {palette.format_value(d)}")
    return "\n".join(lines)


def compare_prompts(args) -> int:
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel

    prompt_a = _prompt(args.prompt_a, args.file_a, "a")
    prompt_b = _prompt(args.prompt_b, args.file_b, "b")
    if args.same_response and args.target_b is not None:
        raise UsageError("--same-response explains A's response under prompt B; --target-b gives another. "
                         "Fix: pass one of them.")
    lm = load_model(args)
    info("Generating and explaining both prompts ...")
    try:
        cmp = ss.compare(
            lm, prompt_a, prompt_b, method=args.method, granularity=args.granularity, pattern=args.pattern,
            response_a=args.target_a or None, response_b=args.target_b or None, same_response=args.same_response,
            system=args.system or None, chat=False if args.raw else None,
            generation=ss.GenerationConfig(max_new_tokens=args.max_new_tokens),
            config=salience_config(args), labels=(args.label_a, args.label_b),
        )
    except ss.SalienceError as e:
        err(str(e))
        return EXIT_USAGE
    if args.json:
        cmp.to_json(args.json, meta={"model": args.model, "prompt_a": prompt_a, "prompt_b": prompt_b,
                                     "system": args.system or "", "raw": bool(args.raw)})
        info(f"Wrote {args.json}")
    if args.html:
        atomic_write_text(args.html, cmp.html(document=True))
        info(f"Wrote {args.html}")
    if not args.quiet:
        console().print(_summary(cmp), markup=False)
    return EXIT_OK
