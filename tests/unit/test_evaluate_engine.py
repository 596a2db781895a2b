"""evaluate.engine and the `evaluate` command on a tiny random model saved to a folder (plumbing).

The per-row numbers are checked against a direct faithfulness_curves call; the command's
files, resume rule and failure reporting against what a user runs.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import cli
from sequence_salience.evaluate import EvalConfig, RowWorker, evaluate_row, run_serial
from sequence_salience.evaluate import engine as engine_module
from sequence_salience.evaluate import runner as runner_module
from sequence_salience.explain import CurvesRequest, FaithfulnessConfig, faithfulness_curves
from tests.unit import tiny_models

ROWS = [
    {"prompt": "The capital of France is Paris. The capital of Italy is Rome.", "target": " Rome."},
    {"prompt": "Alice has three apples and Bob has two apples; together they have five.", "target": " five"},
    {"prompt": "Q: What is 2 + 3? A: 5. Q: What is 7 - 4?", "target": " A: 3."},
    {"prompt": "Sentences end with periods. Paragraphs are separated by blank lines."},
]
CONFIG = EvalConfig(faithfulness=FaithfulnessConfig(granularity="word", steps=4, n_random=3), max_new_tokens=4)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    """A tiny random Llama and its tokenizer saved as a local HF folder (load_model(path) loads it)."""
    return tiny_models.save_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="module")
def tiny_lm(tiny_dir):
    return ss.load_model(tiny_dir)


def write_batch(path, rows, bad_line_at=None):
    lines = [json.dumps(r) for r in rows]
    if bad_line_at is not None:
        lines.insert(bad_line_at, '{"prompt": ""}')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_row_equals_a_direct_faithfulness_call(tiny_lm):
    row = ROWS[0]
    config = EvalConfig(faithfulness=FaithfulnessConfig(granularity="word", steps=4, n_random=3),
                        reduction=True, ig_completeness=True)
    ev = evaluate_row(tiny_lm, row, config)
    json.dumps(ev)  # JSON-able as it is
    prompt = tiny_lm.format_prompt(row["prompt"])
    report = faithfulness_curves(tiny_lm, CurvesRequest(
        prompt, row["target"], config.methods, config=config.faithfulness))
    ranked = [n for n in report.curves["deletion"] if n.split(":")[0] in config.methods]
    # the upper bound is a curve but no baseline: no method is expected to beat the best order found
    assert ev["baselines"][0] == "random"
    assert set(ev["baselines"]) == set(report.curves["deletion"]) - set(ranked) - {"upper_bound"}
    for mode in ("deletion", "insertion"):
        assert ev["upper_bound"][mode] == pytest.approx(report.aopc("upper_bound", mode), abs=1e-12)
        assert ev["decidable"][mode] == report.decidable(mode)
    assert ev["upper_bound_rows"] == report.upper_bound_rows
    assert list(ev["gaps"]["deletion"]) == ranked
    assert ev["n_segments"] == len(report.segments) and ev["n_removed"] == report.n_removed.tolist()
    for mode in ("deletion", "insertion"):
        for name, curve in report.curves[mode].items():
            np.testing.assert_allclose(ev["curves"][mode][name]["logprobs"], curve.logprobs, rtol=0, atol=1e-9)
        for m in ranked:
            for b in ev["baselines"]:
                assert ev["gaps"][mode][m][b] == pytest.approx(report.aopc(m, mode) - report.aopc(b, mode), abs=1e-9)
    # AOPC by hand from the curve: deletion = mean(original - lp), insertion = mean(lp - empty)
    lp = np.array(ev["curves"]["deletion"]["grad_norm"]["logprobs"])
    assert ev["curves"]["deletion"]["grad_norm"]["aopc"] == pytest.approx(np.mean(ev["original_logprob"] - lp))
    lp = np.array(ev["curves"]["insertion"]["random"]["logprobs"])
    assert ev["curves"]["insertion"]["random"]["aopc"] == pytest.approx(np.mean(lp - ev["empty_logprob"]))
    assert ev["target"] == " Rome." and ev["generated"] is False
    for m in config.methods:
        red = ev["reduction"][m]
        assert 0 <= red["kept"] <= red["n_segments"] == ev["n_segments"]
    assert ev["ig_completeness"]["steps"] == 16 and ev["ig_completeness"]["relative_error"] >= 0
    assert evaluate_row(tiny_lm, row, config) == ev  # deterministic


def test_row_without_target_is_generated(tiny_lm):
    ev = evaluate_row(tiny_lm, ROWS[3], CONFIG)
    gen = tiny_lm.generate(tiny_lm.format_prompt(ROWS[3]["prompt"]), ss.GenerationConfig(max_new_tokens=4))
    assert ev["generated"] is True and ev["target"] == gen.text and ev["num_targets"] == len(gen.ids)


def test_serial_runner_reports_a_failing_row_and_goes_on(tiny_lm):
    worker = RowWorker(runner_module.ModelSpec("tiny"), CONFIG, lm=tiny_lm)
    tasks = [(1, ROWS[0]), (2, {"prompt": "word " * 200, "target": " x"}), (3, ROWS[1])]
    out = list(run_serial(tasks, worker))
    assert [o.key for o in out] == [1, 2, 3]
    assert out[1].evaluation is None and "context is 128" in out[1].error
    assert out[0].error is None and out[2].error is None


def test_an_unexpected_exception_fails_only_its_row(tiny_lm, monkeypatch):
    real = engine_module.evaluate_row

    def out_of_memory_on_row_b(lm, row, config, progress=None):
        if row["prompt"] == "b":
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return real(lm, row, config, progress)

    monkeypatch.setattr(runner_module, "evaluate_row", out_of_memory_on_row_b)
    worker = RowWorker(runner_module.ModelSpec("tiny"), CONFIG, lm=tiny_lm)
    out = list(run_serial([(1, {"prompt": "b", "target": " x"}), (2, ROWS[0])], worker))
    assert out[0].error == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert out[1].error is None and out[1].evaluation is not None


def test_command_writes_rows_summary_report_and_reports_a_bad_row(tiny_dir, tmp_path, capsys):
    batch = write_batch(tmp_path / "p.jsonl", ROWS[:2] + [{"prompt": "word " * 200, "target": " x"}], bad_line_at=1)
    out = tmp_path / "out"
    args = ["evaluate", "--batch", batch, "--out", str(out), "--model", tiny_dir, "--granularity", "word",
            "--steps", "4", "--n-random", "3", "--n-boot", "200"]
    assert cli.main(args) == cli.EXIT_ROWS_FAILED
    err = capsys.readouterr().err
    assert f"{batch}:2: field \"prompt\" is missing or empty" in err  # invalid row, by line number
    assert f"{batch}:4 (00004): prompt + target is" in err  # a row that fails while evaluated
    assert "line 2:" in err and "line 4:" in err and "2 evaluated" in err
    assert sorted(os.listdir(out)) == ["00001.json", "00003.json", "log.jsonl", "report.html", "summary.json"]
    saved = json.loads((out / "00003.json").read_text())
    assert saved["meta"]["line"] == 3 and saved["meta"]["input"]["prompt"] == ROWS[1]["prompt"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["n_rows"] == 2 and [f["line"] for f in summary["failures"]] == [2, 4]
    log = [json.loads(ln) for ln in (out / "log.jsonl").read_text().splitlines()]
    assert {(e["line"], e["status"]) for e in log} == {(1, "done"), (2, "error"), (3, "done"), (4, "error")}
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("data:image/png;base64,") == 2
    assert "http://" not in page and "https://" not in page and "<script" not in page  # self-contained
    assert "Failed rows" in page and "grad_norm" in page
    # Paired comparisons with the reference (grad_norm) and the undecidable rows, in all three outputs.
    pairs = summary["summary"]["pairs"]["deletion"]
    assert summary["summary"]["reference"] == "grad_norm" and set(pairs) == {"grad_x_input", "grad_x_input:abs"}
    rows = [json.loads((out / f).read_text())["evaluation"] for f in ("00001.json", "00003.json")]
    d = [r["curves"]["deletion"]["grad_x_input"]["aopc"] - r["curves"]["deletion"]["grad_norm"]["aopc"] for r in rows]
    assert pairs["grad_x_input"]["mean_diff"] == pytest.approx(np.mean(d))
    assert pairs["grad_x_input"]["better"] + pairs["grad_x_input"]["worse"] + pairs["grad_x_input"]["tied"] == 2
    undecided = sum(not r["decidable"]["deletion"] for r in rows)
    assert summary["summary"]["not_decidable"]["deletion"] == undecided
    assert "Paired comparisons with grad_norm" in page and "Rows the test cannot decide" in page
    assert "grad_x_input vs grad_norm (deletion): AOPC difference" in err
    assert f"not decidable on this prompt (deletion): {undecided} of 2 rows" in err


def test_interrupted_run_resumes_with_the_rows_it_had(tiny_dir, tmp_path, capsys, monkeypatch):
    batch = write_batch(tmp_path / "p.jsonl", ROWS)
    out = tmp_path / "out"
    args = ["evaluate", "--batch", batch, "--out", str(out), "--model", tiny_dir, "--granularity", "word",
            "--steps", "4", "--n-random", "3", "--max-new-tokens", "4", "--n-boot", "200"]
    calls = []
    real = engine_module.evaluate_row

    def interrupted_on_third_row(lm, row, config, progress=None):
        calls.append(row["prompt"])
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of row 3
        return real(lm, row, config, progress)

    monkeypatch.setattr(runner_module, "evaluate_row", interrupted_on_third_row)
    assert cli.main(args) == cli.EXIT_INTERRUPTED
    assert sorted(p for p in os.listdir(out) if p.endswith(".json")) == ["00001.json", "00002.json"]
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]
    first = {n: (out / n).read_bytes() for n in ("00001.json", "00002.json")}
    capsys.readouterr()

    calls.clear()
    monkeypatch.setattr(runner_module, "evaluate_row", lambda *a, **k: (calls.append(a[1]["prompt"]), real(*a, **k))[1])
    assert cli.main(args) == cli.EXIT_OK
    assert "2 to do, 2 already done" in capsys.readouterr().err
    assert calls == [ROWS[2]["prompt"], ROWS[3]["prompt"]]  # only the rows not done
    assert all((out / n).read_bytes() == b for n, b in first.items())  # kept as they were

    fresh = tmp_path / "fresh"
    assert cli.main(args[:4] + [str(fresh)] + args[5:]) == cli.EXIT_OK
    for n in ("00001.json", "00002.json", "00003.json", "00004.json"):
        assert json.loads((out / n).read_text())["evaluation"] == json.loads((fresh / n).read_text())["evaluation"]

    # Other settings: every row is redone.
    calls.clear()
    assert cli.main(args + ["--removal", "delete"]) == cli.EXIT_OK
    assert len(calls) == 4


def test_usage_errors(tmp_path, capsys):
    batch = write_batch(tmp_path / "p.jsonl", ROWS[:1])
    base = ["evaluate", "--batch", batch, "--out", str(tmp_path / "o")]
    assert cli.main(base + ["--workers", "2"]) == cli.EXIT_USAGE
    assert "--workers and --gpus-per-worker go with --ray" in capsys.readouterr().err
    assert cli.main(base + ["--method", "nope"]) == cli.EXIT_USAGE
    assert "nope" in capsys.readouterr().err
    assert cli.main(base + ["--granularity", "regex"]) == cli.EXIT_USAGE
    assert "--pattern" in capsys.readouterr().err
    assert cli.main(["evaluate", "--batch", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(base + ["--reference", "smooth_grad"]) == cli.EXIT_USAGE
    assert "--reference smooth_grad is not among the methods evaluated" in capsys.readouterr().err
    assert cli.main(base + ["--reference", "grad_norm:abs"]) == cli.EXIT_USAGE  # grad_norm is not signed


def test_saved_upper_bound_fields_are_checked_before_reuse(tiny_lm):
    """A resume file's upper-bound fields (read by the summary and the report) are checked like the rest:
    all three or none, a number and a bool per mode, and the bound's curve in every mode."""
    import copy

    from sequence_salience.evaluate import check_evaluation

    ev = evaluate_row(tiny_lm, ROWS[0], EvalConfig(faithfulness=FaithfulnessConfig(granularity="word", steps=3,
                                                                                   n_random=2)))
    check_evaluation(ev)  # as written
    bare = {k: v for k, v in ev.items() if k not in ("upper_bound", "decidable", "upper_bound_rows")}
    bare["curves"] = {mode: {n: c for n, c in by.items() if n != "upper_bound"} for mode, by in ev["curves"].items()}
    check_evaluation(bare)  # a row written without the bound (an older run, or --no-upper-bound)

    def broken(edit):
        bad = copy.deepcopy(ev)
        edit(bad)
        return bad

    cases = [
        (lambda e: e["decidable"].__setitem__("deletion", "<script>"), "evaluation.decidable.deletion: expected true"),
        (lambda e: e["upper_bound"].__setitem__("insertion", "x"), "evaluation.upper_bound.insertion: expected a number"),
        (lambda e: e.pop("upper_bound"), "evaluation.upper_bound: missing"),
        (lambda e: e.pop("upper_bound_rows"), "evaluation.upper_bound_rows: missing"),
        (lambda e: e["curves"]["deletion"].pop("upper_bound"), "evaluation.curves.deletion.upper_bound: missing"),
        (lambda e: e["curves"]["insertion"]["upper_bound"]["logprobs"].pop(), "upper_bound.logprobs: 3 points"),
    ]
    for edit, message in cases:
        with pytest.raises(ss.SalienceError, match=message.replace(".", r"\.")):
            check_evaluation(broken(edit))


def test_a_rows_own_budget_replaces_max_new_tokens(tiny_lm):
    """A row's "max_new_tokens" (the shipped chain-of-thought row has one) is its response's budget."""
    row = {**ROWS[3], "max_new_tokens": 2}
    ev = evaluate_row(tiny_lm, row, CONFIG)
    gen = tiny_lm.generate(tiny_lm.format_prompt(ROWS[3]["prompt"]), ss.GenerationConfig(max_new_tokens=2))
    assert ev["target"] == gen.text and ev["num_targets"] == len(gen.ids) == 2 < CONFIG.max_new_tokens
