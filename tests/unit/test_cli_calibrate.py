"""`sequence-salience calibrate` and `explain --method attention_attribution` on a tiny random Llama saved as a
folder: resumable, seeded, and the explain path uses the file it wrote; an unknown model without one is told to
calibrate."""

from __future__ import annotations

import numpy as np
import pytest

from sequence_salience import cli
from sequence_salience.attention import load_estimator
from tests.unit.tiny_models import save_tiny_llama_for, tiny_tokenizer

FLAGS = ["--prompts", "3", "--min-tokens", "30", "--max-tokens", "60", "--sentence-max-tokens", "45", "--masks", "1",
         "--seed", "3"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return save_tiny_llama_for(tiny_tokenizer(), tmp_path_factory.mktemp("tiny") / "llama")


def test_calibrate_resumes_reproduces_and_explain_uses_the_file(folder, tmp_path, capsys):
    out = tmp_path / "calib"
    assert cli.main(["calibrate", "--model", folder, "--out", str(out), *FLAGS]) == cli.EXIT_OK
    first = capsys.readouterr().err
    assert first.count("[") >= 3 and "cached" not in first and "estimator.npz" in first
    est = load_estimator(out / "estimator.npz")
    assert est.recipe["prompts"] == 3 and est.seed == 3 and est.shape.n_layers == 2
    assert cli.main(["calibrate", "--model", folder, "--out", str(out), *FLAGS]) == cli.EXIT_OK
    assert capsys.readouterr().err.count(": cached;") == 3
    np.testing.assert_array_equal(load_estimator(out / "estimator.npz").weight, est.weight)
    # other feature blocks: the same cached measurements (nothing measured again), an estimator reading them
    assert cli.main(["calibrate", "--model", folder, "--out", str(out), *FLAGS, "--features", "span", "question",
                     "position"]) == cli.EXIT_OK
    assert capsys.readouterr().err.count(": cached;") == 3
    assert load_estimator(out / "estimator.npz").features == ("span", "question", "position")
    assert cli.main(["calibrate", "--model", folder, "--out", str(out), *FLAGS]) == cli.EXIT_OK
    capsys.readouterr()
    fresh = tmp_path / "again"
    assert cli.main(["calibrate", "--model", folder, "--out", str(fresh), *FLAGS]) == cli.EXIT_OK
    np.testing.assert_array_equal(load_estimator(fresh / "estimator.npz").weight, est.weight)

    json_out = tmp_path / "r.json"
    assert cli.main(["explain", "--model", folder, "--prompt", "Alice has three apples. Bob has two apples.",
                     "--target", " five", "--method", "attention_attribution", "--attention-estimator",
                     str(out / "estimator.npz"), "--json", str(json_out), "--quiet"]) == cli.EXIT_OK


def test_explain_without_an_estimator_names_calibrate(folder, capsys):
    code = cli.main(["explain", "--model", folder, "--prompt", "Alice has three apples. Bob has two apples.",
                     "--target", " five", "--method", "attention_attribution", "--quiet"])
    assert code != cli.EXIT_OK
    assert "sequence-salience calibrate --model" in capsys.readouterr().err


def test_bad_calibrate_flags_exit_2_before_loading(tmp_path, capsys):
    assert cli.main(["calibrate", "--model", "/nonexistent", "--out", str(tmp_path), "--prompts", "1"]) == cli.EXIT_USAGE
    assert "--prompts 1" in capsys.readouterr().err


def test_a_batch_row_is_redone_when_the_estimator_file_changes():
    from sequence_salience.cli.common import run_settings  # pylint: disable=import-outside-toplevel

    flags = ["explain", "--prompt", "x", "--attention-estimator", "e.npz"]
    args = cli.build_parser().parse_args(flags + ["--method", "attention_attribution"])
    assert run_settings(args, ("attention_attribution",))["attention_estimator"] == "e.npz"
    assert "attention_estimator" not in run_settings(args, ("leave_one_out",))
