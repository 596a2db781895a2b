"""The `sequence-salience` command on the default model, run in a subprocess as a user runs it (the console
script, `python -m sequence_salience.cli`, a Ctrl-C) or, where the exit status and the printed text are what is
checked, in-process through `cli.main(argv)` (no fresh interpreter importing torch)."""

from __future__ import annotations

import html
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

import numpy as np
import torch

import sequence_salience as ss
from sequence_salience import cli, display
from tests.pass_counter import PassCounter

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = pathlib.Path(sys.executable).parent / "sequence-salience"
MODULE = [sys.executable, "-m", "sequence_salience.cli"]


def _run(args, timeout=600, **kw):
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=timeout, **kw)


def test_console_script_explains_a_prompt_and_writes_json_and_html(tmp_path):
    assert SCRIPT.exists(), f"{SCRIPT} missing: the console script is installed by `make setup` (pip install -e .)"
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    proc = _run([str(SCRIPT), "explain", "--prompt", "What is the capital of France?", "--max-new-tokens", "4",
                 "--method", "grad_x_input,grad_norm", "--granularity", "word", "--top", "3",
                 "--json", str(out_json), "--html", str(out_html)])
    assert proc.returncode == 0, proc.stderr
    result, meta = display.load(out_json, with_meta=True)
    # Without --per-token: the whole response's salience, computed directly; no matrices.
    assert result.matrices == {} and meta["matrices"] is False
    assert set(result.spans[(0, result.num_targets)]) == {"grad_x_input", "grad_norm"}
    units = 3 * 30  # the pass reports its layers: the default model's 30 for the forward, two per backward layer
    assert f"grad_x_input+grad_norm: {units}/{units}\n" in proc.stderr
    assert 1 <= result.num_targets <= 4 and meta["generated"] is True
    assert "What is the capital of France?" in result.text[: result.prompt_end]
    page = out_html.read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", "", page, flags=re.S))
    assert page.startswith("<!DOCTYPE html>") and "What is the capital of France?" in text
    # The terminal shows the prompt, the response and a 3-row table of top words.
    assert "Top words" in proc.stdout and "What is the capital of France?" in proc.stdout
    assert result.text[result.prompt_end:].strip()[:10] in proc.stdout
    table_rows = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("│")]
    assert len(table_rows) == 3, proc.stdout


def test_given_target_is_explained_as_is(tmp_path, capsys):
    out_json = tmp_path / "t.json"
    code = cli.main(["explain", "--prompt", "Is the sky blue? Answer yes or no.", "--target", " Yes.",
                     "--granularity", "sentence", "--quiet", "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK, err
    assert out == ""  # --quiet
    result, meta = display.load(out_json, with_meta=True)
    assert result.text.endswith(" Yes.") and meta["generated"] is False


def test_whole_answer_is_one_backward_equal_to_the_matrices_and_per_token_keeps_them(tmp_path, monkeypatch, capsys):
    """The default model, a shipped prompt: the span run does one forward + backward (counted), its
    values equal the rows sum / Gram of compute_salience's matrices; --per-token computes every row."""
    lines = (REPO / "lit_app/data/case_studies.jsonl").read_text(encoding="utf-8").splitlines()
    case = next(json.loads(ln) for ln in lines if "arrive?" in ln)  # the train's chain of thought
    # The answer alone (7 tokens): the reference matrices and --per-token cost one backward per answer token, and
    # what is checked (one pass, the rows' sum, every row) does not depend on their number (was 22 tokens).
    target = " 4:05 pm."
    args = ["explain", "--prompt", case["prompt"], "--target", target, "--method", "grad_x_input,grad_norm",
            "--quiet", "--json"]
    count = PassCounter().install(monkeypatch)
    assert cli.main(args + [str(tmp_path / "span.json")]) == cli.EXIT_OK
    assert (count.backwards, count.targets, count.forwards) == (1, 1, 1)
    span, meta = display.load(tmp_path / "span.json", with_meta=True)
    assert span.matrices == {} and meta["matrices"] is False

    lm = ss.load_model()
    ref = ss.compute_salience(lm, lm.format_prompt(case["prompt"], system=case["system"] or None), target,
                              methods=("grad_x_input", "grad_norm"))
    np.testing.assert_array_equal(span.ids, ref.ids)
    n = ref.num_targets
    values = span.spans[(0, n)]
    scale = np.abs(ref.matrices["grad_x_input"].sum(0)).max()
    np.testing.assert_allclose(values["grad_x_input"], ref.matrices["grad_x_input"].sum(0), rtol=1e-3,
                               atol=1e-4 * scale)
    gram_norm = np.sqrt(np.clip(ref.extras["grad_gram"].sum((1, 2)), 0, None))
    np.testing.assert_allclose(values["grad_norm"], gram_norm, rtol=1e-3, atol=1e-4 * gram_norm.max())

    before = count.targets
    assert cli.main(args + [str(tmp_path / "full.json"), "--per-token"]) == cli.EXIT_OK
    assert count.targets - before == n
    full = display.load(tmp_path / "full.json")
    np.testing.assert_allclose(full.matrices["grad_x_input"], ref.matrices["grad_x_input"], rtol=1e-3,
                               atol=1e-4 * np.abs(ref.matrices["grad_x_input"]).max())
    assert "per-token matrices" in capsys.readouterr().err


def test_missing_prompt_file_is_a_clear_error_with_exit_code_2(tmp_path):
    path = tmp_path / "prompt.txt"
    proc = _run(MODULE + ["explain", "--prompt-file", str(path)], timeout=120)
    assert proc.returncode == 2
    assert f"--prompt-file {path}: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr and "Loading model" not in proc.stderr  # fails before loading the model


@pytest.mark.parametrize("content, message", [
    (b"   \n", "is empty"),
    (b"\xff\xfe bad bytes", "not UTF-8"),
])
def test_unusable_prompt_file_is_a_clear_error_with_exit_code_2(tmp_path, capsys, content, message):
    path = tmp_path / "prompt.txt"
    path.write_bytes(content)
    assert cli.main(["explain", "--prompt-file", str(path)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and str(path) in err and "Loading model" not in err


@pytest.mark.parametrize("args, message", [
    (["--prompt", "x", "--granularity", "regex"], "needs --pattern"),
    (["--prompt", "x", "--granularity", "regex", "--pattern", "(?<=a)b"], "lookbehind"),
    (["--prompt", "x", "--span", "3:1"], "--span"),
    (["--prompt", "x", "--method", "saliency"], "Unknown salience method"),
    (["--batch", "missing.jsonl", "--out", "o"], "no such file"),
    (["--batch", "x.jsonl"], "needs --out"),
    (["--prompt", "x", "--html"], "needs a PATH"),
    (["--prompt", "x", "--out", "o"], "go with --batch"),
])
def test_bad_flags_exit_with_code_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["explain"] + args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "Loading model" not in err
    assert os.listdir(tmp_path) == []  # nothing written


def test_unloadable_model_exits_with_code_3(tmp_path, capsys):
    code = cli.main(["explain", "--prompt", "hi", "--model", str(tmp_path / "no_such_model")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_MODEL == 3, err
    assert "cannot load --model" in err and "Traceback" not in err


def _log(out: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]


def _main(args: list[str], capsys) -> tuple[int, str]:
    """`cli.main(args)` in this process: (exit status, what it printed on stderr)."""
    code = cli.main(args)
    return code, capsys.readouterr().err


def test_batch_reports_bad_rows_and_resumes_after_an_interruption_without_redoing_rows(tmp_path, capsys):
    """Run 1 in a child process (it gets a Ctrl-C); the reruns in-process (`cli.main`)."""
    rows = [
        json.dumps({"prompt": "Say hello.", "target": " Hello!"}),                                  # line 1
        "{not json",                                                                                  # line 2
        # line 3: long (~400 tokens: 14 s of CPU here, a third of the ~1,100-token row it replaces, which took
        # 6 s on one loaded core of a faster machine), so that the Ctrl-C sent within 20 ms of row 1's file
        # appearing lands while it runs, with a wide margin on a faster machine. Run 2 computes this row in
        # full (it was ~3,500 tokens, then ~1,100: docs/benchmarks.md, "Session 42 (h3)").
        json.dumps({"prompt": "Name a colour after reading this list: "
                    + ", ".join(f"item {k}" for k in range(80)) + ".", "target": " Blue."}),
        json.dumps({"prompt": ""}),                                                                   # line 4
        "",                                                                                           # blank: ignored
        json.dumps({"id": "long", "prompt": "Write one sentence about the sea.",
                    "target": " The sea is wide and deep, and gulls circle above the boats."}),                              # line 6
        json.dumps({"prompt": "What is 2 + 2?", "target": " 4"}),                                   # line 7
    ]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "results"
    cmd = MODULE + ["explain", "--batch", str(prompts), "--out", str(out), "--method", "grad_x_input"]

    # Run 1: interrupt (Ctrl-C) as soon as the first row's result exists.
    # SIGINT back to its default in the child: a test run started in the background (as CI may
    # do) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = out / "00001.json"
    deadline = time.monotonic() + 300
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.exists(), proc.communicate(timeout=60)[1] if proc.poll() is not None else "timed out"
    proc.send_signal(signal.SIGINT)
    _, err1 = proc.communicate(timeout=120)
    assert proc.returncode == 130, err1
    assert "interrupted" in err1
    assert not (out / "long.json").exists() or not (out / "00007.json").exists(), "the run was not interrupted"
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")], "a half-written file was left behind"
    assert f"{prompts}:2: not valid JSON" in err1 and f"{prompts}:4: field \"prompt\" is missing" in err1
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")}
    assert "00001.json" in before
    for name in before:  # whatever was written is a complete, loadable result
        display.load(out / name)
    n_log = len(_log(out))

    # Run 2: resumes; finished rows are skipped (not rewritten), the rest are explained.
    code2, err2 = _main(cmd[len(MODULE):], capsys)
    assert code2 == cli.EXIT_ROWS_FAILED == 1, err2  # rows 2 and 4 are bad
    assert f"{prompts}:2: not valid JSON" in err2
    run2 = {e["line"]: e for e in _log(out)[n_log:]}
    expected_files = {1: "00001.json", 3: "00003.json", 6: "long.json", 7: "00007.json"}
    for line, name in expected_files.items():
        status = "skipped" if name in before else "done"
        assert run2[line]["status"] == status, (line, run2[line])
        assert (out / name).exists()
    assert run2[2]["status"] == run2[4]["status"] == "error"
    for name, mtime in before.items():
        assert (out / name).stat().st_mtime_ns == mtime, f"{name} was rewritten"
    result, meta = display.load(out / "long.json", with_meta=True)
    assert meta["line"] == 6 and result.text.endswith("gulls circle above the boats.")
    assert "Done: " in err2 and "line 2:" in err2 and "line 4:" in err2

    # Run 3: adds HTML for finished rows without loading the model or touching the JSON files.
    after2 = {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")}
    code3, err3 = _main(cmd[len(MODULE):] + ["--html"], capsys)
    assert code3 == 1, err3
    assert "Loading model" not in err3
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")} == after2
    assert sorted(p.name for p in out.glob("*.html")) == sorted(n.replace(".json", ".html")
                                                                for n in expected_files.values())

    # A changed row is redone (its input no longer matches the saved result).
    rows[6] = json.dumps({"prompt": "What is 2 + 2?", "target": " Four"})
    prompts.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code4, _ = _main(cmd[len(MODULE):], capsys)
    assert code4 == 1
    run4 = {e["line"]: e["status"] for e in _log(out)[-6:]}
    assert run4[7] == "done" and run4[1] == run4[3] == run4[6] == "skipped"
    assert display.load(out / "00007.json").text.endswith(" Four")


def test_compare_an_edit_with_the_default_model(tmp_path, default_lm, capsys):
    """`compare` with its flags through `cli.main` (what the console script runs; the first test runs the script
    itself): two prompts one number apart; the old answer's log p under the new prompt equals a plain
    teacher-forced forward of the default model."""
    out_json, out_html = tmp_path / "c.json", tmp_path / "c.html"
    prompt = "Alice has {} apples and Bob gives her 2 more. How many apples does Alice have?"
    code = cli.main(["compare", "--prompt-a", prompt.format(3), "--prompt-b", prompt.format(5),
                     "--max-new-tokens", "8", "--json", str(out_json), "--html", str(out_html)])
    stdout, stderr = capsys.readouterr()
    assert code == cli.EXIT_OK, stderr
    obj = json.loads(out_json.read_text(encoding="utf-8"))
    changed = [(s["kind"], s["text_a"].strip(), s["text_b"].strip()) for s in obj["prompts"]["segments"]
               if s["kind"] != "equal"]
    assert changed == [("replace", "3", "5")]
    from sequence_salience.result import result_from_dict

    a, b = result_from_dict(obj["result_a"]), result_from_dict(obj["result_b"])
    assert a.text[: a.prompt_end].count("<|im_start|>") == 3  # the chat template was applied
    ids = list(b.ids[: b.n_prompt_tokens]) + list(a.ids[a.n_prompt_tokens:])
    with torch.no_grad():
        logits = default_lm.model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    p = b.n_prompt_tokens
    expected = [logp[p + t - 1, tid].item() for t, tid in enumerate(a.ids[a.n_prompt_tokens:])]
    np.testing.assert_allclose(obj["cross"]["under_b"]["logprobs"], expected, atol=1e-3)
    np.testing.assert_allclose(obj["cross"]["under_a"]["logprobs"], a.target_logprobs, atol=1e-6)
    assert obj["cross"]["delta"] == pytest.approx(sum(expected) - float(a.target_logprobs.sum()), abs=1e-2)
    page = out_html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Δ log p" in page and "ss-view-difference" in page
    assert f"Δ log p = {obj['cross']['delta']:+.3f}" in stdout
