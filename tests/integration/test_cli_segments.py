"""Segment methods (leave one out, the ContextCite surrogate) in the `sequence-salience` command, default model.

References: the library's own ablation.segment_salience on the same pair (its exactness against
plain forwards is tests/unit/test_ablation.py's), the saved result summed per segment, and the
registry's records for the flags' defaults.
"""

from __future__ import annotations

import html
import json
import os
import re

import numpy as np
import pytest

from sequence_salience import ablation, aggregate, cli, display
from sequence_salience.ablation import AblationConfig
from sequence_salience.methods import ablation_surrogate, get_any_method, integrated_gradients, leave_one_out, smooth_grad

PROMPT = "The meeting is on Tuesday. The office is in Paris. Bring your laptop. Where is the office?"
TARGET = " The office is in Paris."


def _table_rows(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if ln.strip().startswith("│") and re.match(r"│\s*\d+\s*│", ln.strip())]


def test_explain_leave_one_out_prints_ranked_segments_and_cost_and_saves_them(tmp_path, capsys, default_lm):
    out_json, out_html = tmp_path / "loo.json", tmp_path / "loo.html"
    assert cli.main(["explain", "--prompt", PROMPT, "--target", TARGET, "--method", leave_one_out.NAME,
                     "--top", "3", "--json", str(out_json), "--html", str(out_html)]) == cli.EXIT_OK
    captured = capsys.readouterr()
    want = ablation.segment_salience(default_lm, default_lm.format_prompt(PROMPT), TARGET, leave_one_out.NAME,
                                     granularity="sentence")
    result, meta = display.load(out_json, with_meta=True)
    (saved,) = meta["segment_salience"]
    # The JSON holds SegmentSalience.to_json() at the default granularity for a segment method: sentence.
    assert saved["method"] == leave_one_out.NAME and saved["granularity"] == "sentence"
    assert [s["text"] for s in saved["segments"]] == want.segment_texts()
    np.testing.assert_allclose([s["value"] for s in saved["segments"]], want.values, rtol=0, atol=1e-4)
    assert saved["rows"] == want.stats.rows == len(want.values) + 1
    # The saved result, summed per sentence, gives the values back.
    seg = aggregate.segment(result.text, result.offsets, "sentence", role_spans=result.role_spans)
    sums = aggregate.aggregate(result.span_salience(leave_one_out.NAME), seg, "sum")
    np.testing.assert_allclose(sums[want.segment_index], want.values, rtol=1e-4, atol=1e-4)
    # The terminal: the top 3 sentences by |value|, with their values, and the forward work.
    rows = _table_rows(captured.out)
    assert len(rows) == 3, captured.out
    for row, i in zip(rows, np.argsort(-np.abs(want.values), kind="stable")[:3]):
        assert want.segment_texts()[i].strip()[:20] in row
    assert "Top sentences" in captured.out and f"cost: {want.stats.rows} forward rows (removal: filler)" in \
        " ".join(captured.out.split())
    assert "R\u00b2" not in captured.out  # leave one out has no fit
    assert f"{leave_one_out.NAME}: {len(want.values)} sentence segments, {want.stats.rows} forward rows" in captured.err
    assert f"{leave_one_out.NAME}: {len(want.values)}/{len(want.values)}" in captured.err  # the progress line
    page = html.unescape(out_html.read_text(encoding="utf-8"))
    assert "The office is in Paris." in page and f"{want.stats.rows} forward rows" in page
    # `show` re-renders it without a model, at its own granularity only.
    assert cli.main(["show", str(out_json), "--top", "3"]) == cli.EXIT_OK
    shown = capsys.readouterr().out
    assert _table_rows(shown) == rows
    assert cli.main(["show", str(out_json), "--granularity", "word"]) == cli.EXIT_USAGE
    assert "live on sentence segments" in capsys.readouterr().err


def test_explain_surrogate_with_its_flags_prints_the_fit(tmp_path, capsys, default_lm):
    out_json = tmp_path / "s.json"
    assert cli.main(["explain", "--prompt", PROMPT, "--target", TARGET, "--method", ablation_surrogate.NAME,
                     "--ablations", "12", "--removal", "delete", "--json", str(out_json)]) == cli.EXIT_OK
    out = " ".join(capsys.readouterr().out.split())
    want = ablation.segment_salience(default_lm, default_lm.format_prompt(PROMPT), TARGET, ablation_surrogate.NAME,
                                     granularity="sentence", config=AblationConfig(removal="delete", surrogate_masks=12))
    (saved,) = display.load(out_json, with_meta=True)[1]["segment_salience"]
    distinct = {tuple(row) for row in want.kept if not row.all()}  # the edited prompts (duplicates scored once)
    assert want.kept.shape[0] == 12 and saved["removal"] == "delete"
    assert saved["rows"] == want.stats.rows == len(distinct) + 1  # + the unedited prompt
    np.testing.assert_allclose([s["value"] for s in saved["segments"]], want.values, rtol=0, atol=1e-3)
    assert saved["quality"]["r2"] == pytest.approx(want.quality["r2"], abs=1e-3)
    r2, corr = saved["quality"]["r2"], saved["quality"]["correlation"]
    low, high = saved["quality"]["r2_low"], saved["quality"]["r2_high"]
    spread = f" ({low:.2f}\u2013{high:.2f} over random splits)" if high > low else ""
    assert f"fit on held-out ablations: R\u00b2 {r2:.2f}{spread}, correlation {corr:.2f}" in out
    assert f"cost: {saved['rows']} forward rows (removal: delete)" in out
    if saved["warning"]:  # a poor fit says so (a fit on this prompt is good: R^2 0.94 when written)
        assert "⚠ " + " ".join(saved["warning"].split()) in out
    else:
        assert "⚠" not in out


def test_batch_with_a_segment_method_writes_one_row_per_line_and_resumes(tmp_path, capsys):
    batch, out = tmp_path / "rows.jsonl", tmp_path / "out"
    batch.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": PROMPT, "target": TARGET, "id": "office"},
        {"prompt": "Alice is 30. Bob is 25. Who is older?", "target": " Alice.", "id": "ages"},
    ]) + "\n", encoding="utf-8")
    args = ["explain", "--batch", str(batch), "--out", str(out), "--method", f"grad_norm,{leave_one_out.NAME}",
            "--html"]
    assert cli.main(args) == cli.EXIT_OK
    for rid in ("office", "ages"):
        result, meta = display.load(out / f"{rid}.json", with_meta=True)
        (saved,) = meta["segment_salience"]
        assert saved["granularity"] == "sentence" and meta["settings"]["segments"]["granularity"] == "sentence"
        assert set(result.spans[(0, result.num_targets)]) == {"grad_norm", leave_one_out.NAME}
        page = html.unescape((out / f"{rid}.html").read_text(encoding="utf-8"))
        assert "grad_norm · sentences" in page  # the first method is shown, at sentence granularity
    capsys.readouterr()
    assert cli.main(args) == cli.EXIT_OK  # same settings: nothing to redo
    assert "0 to do, 2 already done" in capsys.readouterr().err
    assert cli.main(args + ["--granularity", "line"]) == cli.EXIT_OK  # other segments: other values, redone
    assert "2 to do, 0 already done" in capsys.readouterr().err
    assert display.load(out / "ages.json", with_meta=True)[1]["segment_salience"][0]["granularity"] == "line"


def test_evaluate_accepts_a_segment_method(tmp_path):
    batch, out = tmp_path / "rows.jsonl", tmp_path / "eval"
    batch.write_text(json.dumps({"prompt": PROMPT, "target": TARGET}) + "\n", encoding="utf-8")
    assert cli.main(["evaluate", "--batch", str(batch), "--out", str(out), "--method",
                     f"grad_norm,{leave_one_out.NAME}", "--granularity", "sentence", "--steps", "2",
                     "--n-random", "2", "--n-boot", "20"]) == cli.EXIT_OK
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))["summary"]
    assert {"grad_norm", leave_one_out.NAME} <= set(summary["methods"])  # (signed ones also ranked by |value|)
    assert leave_one_out.NAME in summary["verdicts"]


@pytest.mark.parametrize("args, message", [
    (["explain", "--prompt", "x", "--method", leave_one_out.NAME, "--per-token"],
     "leave_one_out is a segment method"),
    (["explain", "--prompt", "x", "--method", ablation_surrogate.NAME, "--heatmap", "m.png"],
     "Fix: drop --heatmap"),
    (["explain", "--prompt", "x", "--method", "leave_one_ot"], "Fix: use one of"),
    (["compare", "--prompt-a", "a", "--prompt-b", "b", "--method", leave_one_out.NAME], "Fix: compare with a token"),
    (["evaluate", "--batch", "b.jsonl", "--out", "o", "--method", "nope"], "leave_one_out"),
], ids=["per-token", "heatmap", "unknown", "compare", "evaluate-unknown"])  # --ablations 0: tests/unit/test_field_rules.py
def test_segment_method_mistakes_exit_2_with_the_fix_before_loading(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "Loading model" not in err
    assert os.listdir(tmp_path) == []


def test_count_flags_read_their_defaults_from_the_registry():
    parser = cli.build_parser()
    ex = parser.parse_args(["explain", "--prompt", "x"])
    assert ex.ig_steps == get_any_method(integrated_gradients.NAME).default_count
    assert ex.smooth_grad_samples == get_any_method(smooth_grad.NAME).default_count
    assert ex.ablations == get_any_method(ablation_surrogate.NAME).default_count
    assert ex.removal == "filler" and ex.granularity is None  # resolved per method kind in main
    text = parser._subparsers._group_actions[0].choices["explain"].format_help()  # pylint: disable=protected-access
    for name in (leave_one_out.NAME, ablation_surrogate.NAME, "grad_norm", "smooth_grad"):
        assert name in text
