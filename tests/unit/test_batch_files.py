"""The batch tools' input and output files on a tiny model folder (issue 33, smaller points).

* One JSON line nested too deeply for Python's parser (RecursionError) fails that row with a clear
  message; the other rows run. The same for a saved row file nested too deeply: it is not done.
* The files `explain --batch` and `evaluate` write in --out never go through a symbolic link: a
  linked log.jsonl stops the run before any row, with the fix, and the link's target (existing or
  not) is left as it was; a linked row file is replaced by the row's file (atomic rename), its
  target untouched.
"""

from __future__ import annotations

import json
import os

import pytest

from sequence_salience import cli
from tests.unit.tiny_models import save_tiny_llama

ROWS = [{"prompt": "The capital of France is", "target": " Paris."},
        {"prompt": "Alice has three apples.", "target": " Bob has two."}]
DEEP = "[" * 100_000 + "]" * 100_000
DEEP_FIELD = '{"prompt": "x", "case": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def _explain(folder, batch, out):
    return cli.main(["explain", "--model", folder, "--batch", str(batch), "--out", str(out),
                     "--method", "grad_x_input"])


def test_a_deeply_nested_line_fails_its_row_and_the_batch_goes_on(folder, tmp_path, capsys):
    batch = tmp_path / "p.jsonl"
    batch.write_text("\n".join([json.dumps(ROWS[0]), DEEP, DEEP_FIELD, json.dumps(ROWS[1])]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert _explain(folder, batch, out) == cli.EXIT_ROWS_FAILED
    err = capsys.readouterr().err
    for line in (2, 3):
        assert f"{batch}:{line}: JSON nested too deeply to read; a row is one flat object" in err
    assert sorted(p for p in os.listdir(out) if p.endswith(".json")) == ["00001.json", "00004.json"]
    log = [json.loads(ln) for ln in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {(e["line"], e["status"]) for e in log} == {(1, "done"), (2, "error"), (3, "error"), (4, "done")}
    # A saved row file nested too deeply (edited, or truncated into garbage) is not done: the row is redone.
    (out / "00001.json").write_text(DEEP, encoding="utf-8")
    assert _explain(folder, batch, out) == cli.EXIT_ROWS_FAILED
    err = capsys.readouterr().err
    assert "4 row(s): 1 to do, 1 already done, 2 invalid." in err
    assert json.loads((out / "00001.json").read_text(encoding="utf-8"))["meta"]["line"] == 1


@pytest.mark.parametrize("target_exists", [True, False], ids=["to-a-file", "dangling"])
@pytest.mark.parametrize("command", ["explain", "evaluate"])
def test_a_symlinked_log_in_out_is_refused_and_its_target_untouched(folder, tmp_path, capsys, command,
                                                                     target_exists):
    batch = tmp_path / "p.jsonl"
    batch.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    outside = tmp_path / "elsewhere" / "victim.txt"
    outside.parent.mkdir()
    if target_exists:
        outside.write_text("keep me\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / "log.jsonl")
    if command == "explain":
        code = _explain(folder, batch, out)
    else:
        code = cli.main(["evaluate", "--model", folder, "--batch", str(batch), "--out", str(out), "--steps", "2",
                         "--n-random", "1", "--n-boot", "10"])
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert (f"--out {out}: log.jsonl there is a symbolic link (to {outside}); the batch tools do not write "
            "through links. Fix: remove the link, or give another --out." in err)
    assert "Loading model" not in err and sorted(os.listdir(out)) == ["log.jsonl"]  # stopped before any row
    if target_exists:
        assert outside.read_text(encoding="utf-8") == "keep me\n"
    else:
        assert not outside.exists()


def test_a_symlinked_row_file_is_replaced_not_written_through(folder, tmp_path):
    batch = tmp_path / "p.jsonl"
    batch.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    outside = tmp_path / "victim.json"
    outside.write_text("keep me\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / "00001.json")
    assert _explain(folder, batch, out) == cli.EXIT_OK
    assert outside.read_text(encoding="utf-8") == "keep me\n"
    assert not os.path.islink(out / "00001.json")
    assert json.loads((out / "00001.json").read_text(encoding="utf-8"))["meta"]["line"] == 1


@pytest.mark.parametrize("command", ["explain", "evaluate"])
def test_a_failing_row_whose_message_looks_like_console_markup_is_printed_as_it_is(folder, tmp_path, capsys, command):
    """The progress bar's console reads [tags]: a batch file named "[/x]..." made the first failing row's
    message raise rich's MarkupError and end the run."""
    (tmp_path / "[").mkdir()
    batch = tmp_path / "[" / "x][bold]p.jsonl"  # the path holds "[/x]"
    batch.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"prompt": "word " * 200, "target": " x"}) + "\n",
                     encoding="utf-8")
    out = tmp_path / "out"
    if command == "explain":
        code = _explain(folder, batch, out)
    else:
        code = cli.main(["evaluate", "--model", folder, "--batch", str(batch), "--out", str(out), "--steps", "2",
                         "--n-random", "1", "--n-boot", "10", "--granularity", "word"])
    assert code == cli.EXIT_ROWS_FAILED
    err = capsys.readouterr().err
    assert f"{batch}:2 (00002): prompt + target is" in err  # the path printed as it is, [tags] included
    assert (out / "00001.json").exists()


NOT_AS_WRITTEN = "{path} is not a result as `sequence-salience explain` writes it"


@pytest.mark.parametrize("field,value,message", [
    pytest.param("prompt_end", "<script>", NOT_AS_WRITTEN, id="string-prompt_end"),
    pytest.param("text", 5, NOT_AS_WRITTEN, id="number-text"),
    pytest.param("offsets", [1, 2], "offsets have shape (2,); expected [N, 2]", id="flat-offsets"),  # as it was
])
def test_a_saved_result_edited_out_of_shape_fails_its_row_not_the_run(folder, tmp_path, capsys, field, value,
                                                                      message):
    """explain --batch --html over rows already done draws their HTML from the saved files; `show` too.
    A field edited into another type made both die with a traceback (TypeError deep in the drawing)."""
    batch = tmp_path / "p.jsonl"
    batch.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert _explain(folder, batch, out) == cli.EXIT_OK
    path = out / "00001.json"
    obj = json.loads(path.read_text(encoding="utf-8"))
    obj["result"][field] = value
    path.write_text(json.dumps(obj), encoding="utf-8")
    capsys.readouterr()
    code = cli.main(["explain", "--model", folder, "--batch", str(batch), "--out", str(out), "--method",
                     "grad_x_input", "--html"])
    assert code == cli.EXIT_ROWS_FAILED
    err = capsys.readouterr().err
    message = message.format(path=path)
    assert f"{batch}:1 (00001): {message}" in err
    assert message != NOT_AS_WRITTEN.format(path=path) or "Fix: delete it and explain the row again" in err
    assert sorted(p.name for p in out.glob("*.html")) == ["00002.html"]  # the other row went on
    assert cli.main(["show", str(path), "--html", str(tmp_path / "x.html")]) == cli.EXIT_USAGE
    assert message in capsys.readouterr().err and not (tmp_path / "x.html").exists()


def test_show_of_a_file_nested_too_deeply_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text(DEEP, encoding="utf-8")
    assert cli.main(["show", str(path)]) == cli.EXIT_USAGE
    assert NOT_AS_WRITTEN.format(path=path) + " (RecursionError: maximum recursion depth" in capsys.readouterr().err


def test_a_rows_own_max_new_tokens_is_its_budget_and_a_bad_one_fails_the_row(folder, tmp_path, capsys):
    """The shipped rows may carry "max_new_tokens" (the chain-of-thought case): the batch reads it as that row's
    budget instead of --max_new_tokens (64 here; the tiny model never ends its turn, so each budget shows)."""
    batch = tmp_path / "p.jsonl"
    rows = [{"prompt": "one two", "max_new_tokens": 3, "id": "own"}, {"prompt": "one two", "id": "default"},
            {"prompt": "one two", "max_new_tokens": 0, "id": "bad"}]
    batch.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert _explain(folder, batch, out) == cli.EXIT_ROWS_FAILED
    assert f'{batch}:3: field "max_new_tokens" is 0; use a whole number from 1 to 1024' in capsys.readouterr().err
    n_targets = {}
    for rid in ("own", "default"):
        result = json.loads((out / f"{rid}.json").read_text(encoding="utf-8"))["result"]
        n_targets[rid] = len(result["tokens"]) - result["n_prompt_tokens"]
    assert n_targets == {"own": 3, "default": 64}


def test_a_row_with_a_lone_surrogate_fails_that_row_and_the_batch_goes_on(folder, tmp_path, capsys):
    """`"\\ud800"` decodes to half a UTF-16 pair: the tokenizer raised TypeError and the run died (issue 43)."""
    batch = tmp_path / "p.jsonl"
    batch.write_text("\n".join([json.dumps(ROWS[0]), '{"prompt": "\\ud800"}', '{"prompt": "ok", "target": "a\\udfff"}',
                                '{"prompt": "\\ud83d\\ude00 fine"}', json.dumps(ROWS[1])]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert _explain(folder, batch, out) == cli.EXIT_ROWS_FAILED
    err = capsys.readouterr().err
    assert f'{batch}:2: field "prompt" holds a lone surrogate \\ud800 at character 0' in err
    assert f'{batch}:3: field "target" holds a lone surrogate \\udfff at character 1' in err
    # Later rows ran (a surrogate pair is one character, and fine).
    assert sorted(p for p in os.listdir(out) if p.endswith(".json")) == ["00001.json", "00004.json", "00005.json"]
    log = [json.loads(ln) for ln in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {(e["line"], e["status"]) for e in log} == {(1, "done"), (2, "error"), (3, "error"), (4, "done"),
                                                        (5, "done")}
