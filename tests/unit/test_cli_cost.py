"""The CLI's cost model on a tiny model folder: a span is one forward + backward, matrices only when needed.

Backward passes, the target tokens they cover and model forwards are counted by
tests/pass_counter.py (hooks around the real torch.autograd.grad and the loaded model).
Span values are checked against an independent reference: compute_salience on the same
pair, then the rows sum (grad_x_input) or the Gram block (grad_norm) of its matrices.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import transformers

import sequence_salience as ss
from sequence_salience import cli, display
from tests.pass_counter import PassCounter
from tests.unit.tiny_models import tiny_llama, tiny_tokenizer

PROMPT = "The capital of France is"
TARGET = " Paris. The capital of Italy is Rome."
METHODS = ("grad_x_input", "grad_norm")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama_cli")
    tiny_llama(seed=0).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def reference(folder):
    """Per-token matrices of the same pair, computed directly with the library."""
    lm = ss.load_model(folder)
    return ss.compute_salience(lm, lm.format_prompt(PROMPT), TARGET, methods=METHODS)


@pytest.fixture
def count(monkeypatch):
    return PassCounter().install(monkeypatch)


def _explain(folder, *extra):
    return cli.main(["explain", "--model", folder, "--prompt", PROMPT, "--target", TARGET,
                     "--method", ",".join(METHODS), "--quiet", *extra])


@pytest.mark.parametrize("span", [None, (2, 5), (3, 4)])
def test_span_run_is_one_forward_and_backward_and_equals_the_full_matrices(folder, reference, count, tmp_path,
                                                                            capsys, span):
    out = tmp_path / "r.json"
    extra = ["--span", f"{span[0]}:{span[1]}"] if span else []
    assert _explain(folder, "--json", str(out), *extra) == cli.EXIT_OK
    assert (count.backwards, count.targets, count.forwards) == (1, 1, 1)
    err = capsys.readouterr().err
    # The one pass reports its layers (salience.compute_span_result): the forward as many units as layers, each
    # backward layer two; the line ends at the whole pass.
    layers = transformers.AutoConfig.from_pretrained(folder).num_hidden_layers
    assert f"grad_x_input+grad_norm: {3 * layers}/{3 * layers}\n" in err
    assert f"grad_x_input+grad_norm: {layers}/{3 * layers}" in err  # the forward, before the backward's layers
    result, meta = display.load(out, with_meta=True)
    t0, t1 = span or (0, reference.num_targets)
    assert result.matrices == {} and meta["matrices"] is False and list(result.spans) == [(t0, t1)]
    np.testing.assert_array_equal(result.ids, reference.ids)
    grads = reference.matrices["grad_x_input"][t0:t1].sum(0)
    gram = reference.extras["grad_gram"][:, t0:t1, t0:t1].sum((1, 2))
    np.testing.assert_allclose(result.spans[(t0, t1)]["grad_x_input"], grads, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.spans[(t0, t1)]["grad_norm"], np.sqrt(np.clip(gram, 0, None)),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.target_logprobs, reference.target_logprobs, rtol=1e-5, atol=1e-6)


def test_per_token_computes_every_target_and_keeps_the_matrices(folder, reference, count, tmp_path, capsys):
    out = tmp_path / "full.json"
    assert _explain(folder, "--per-token", "--json", str(out)) == cli.EXIT_OK
    assert count.targets == reference.num_targets and count.forwards == 1
    result, meta = display.load(out, with_meta=True)
    assert meta["matrices"] is True and set(result.matrices) == set(METHODS)
    for m in METHODS:
        np.testing.assert_allclose(result.matrices[m], reference.matrices[m], rtol=1e-4, atol=1e-6)
    assert f"grad_x_input: {reference.num_targets}/{reference.num_targets}" in capsys.readouterr().err


def test_per_token_without_a_gram_tensor_adds_the_grad_norm_span_directly(folder, reference, count, tmp_path,
                                                                          monkeypatch):
    """A result too large to keep grad_norm's Gram tensor cannot sum its rows: one extra backward answers the span."""
    monkeypatch.setattr(ss, "SalienceConfig", functools.partial(ss.SalienceConfig, gram_max_elements=0))
    out = tmp_path / "full.json"
    assert _explain(folder, "--per-token", "--json", str(out)) == cli.EXIT_OK
    assert count.targets == reference.num_targets + 1
    result = display.load(out)
    assert "grad_gram" not in result.extras and set(result.matrices) == set(METHODS)
    expected = np.sqrt(np.clip(reference.extras["grad_gram"].sum((1, 2)), 0, None))
    np.testing.assert_allclose(result.span_salience("grad_norm"), expected, rtol=1e-4, atol=1e-6)


def test_heatmap_needs_and_computes_the_matrices(folder, reference, count, tmp_path):
    png = tmp_path / "map.png"
    assert _explain(folder, "--heatmap", str(png)) == cli.EXIT_OK
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert count.targets == reference.num_targets


def test_span_only_json_renders_in_every_mode_and_says_what_to_do_for_the_rest(folder, tmp_path, capsys):
    out, page = tmp_path / "span.json", tmp_path / "span.html"
    assert _explain(folder, "--span", "1:4", "--json", str(out)) == cli.EXIT_OK
    loaded = ss.SalienceResult.load(out)
    assert loaded.matrices == {} and loaded.has_span("grad_x_input", 1, 4) and not loaded.has_span("grad_x_input")
    capsys.readouterr()
    # Terminal and HTML of the span it holds.
    assert cli.main(["show", str(out), "--span", "1:4", "--html", str(page), "--top", "2"]) == cli.EXIT_OK
    captured = capsys.readouterr()
    assert "no per-token matrices" in captured.err and "Top words" in captured.out
    assert "tokens 1:4" in captured.out
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    # Another span, or a heatmap, needs the matrices: exit 2, naming --per-token.
    assert cli.main(["show", str(out)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--per-token" in err and "--span 1:4" in err
    assert cli.main(["show", str(out), "--span", "1:4", "--heatmap", str(tmp_path / "m.png")]) == cli.EXIT_USAGE
    assert "--heatmap needs the per-token matrices" in capsys.readouterr().err
    assert not (tmp_path / "m.png").exists()


def test_span_only_terminal_output_matches_the_full_result(folder, reference, tmp_path, capsys):
    """The top table of a span-only run equals the one rendered from the full matrices."""
    out = tmp_path / "s.json"
    assert cli.main(["explain", "--model", folder, "--prompt", PROMPT, "--target", TARGET, "--method",
                     "grad_x_input", "--span", "0:3", "--top", "4", "--json", str(out)]) == cli.EXIT_OK
    printed = capsys.readouterr().out
    ref_view = display.make_view(reference, "grad_x_input", "word", (0, 3), top=4)
    view = display.make_view(ss.SalienceResult.load(out), "grad_x_input", "word", (0, 3), top=4)
    assert len(ref_view.ranked) == 4
    assert [r.seg for r in view.ranked] == [r.seg for r in ref_view.ranked]
    np.testing.assert_allclose(view.values, ref_view.values, rtol=1e-4, atol=1e-6)
    for r in ref_view.ranked:
        assert display.palette.format_value(r.value) in printed


# ----------------------------------------------------------------------------
# explain --batch: which saved rows a run reuses


def _statuses(out):
    lines = (out / cli.LOG_NAME).read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["status"] for line in lines]


def _batch(folder, prompts, out, *extra):
    return cli.main(["explain", "--model", folder, "--batch", str(prompts), "--out", str(out),
                     "--method", "grad_x_input", *extra])


def test_batch_reuses_full_rows_for_spans_but_not_span_rows_for_matrices(folder, count, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": PROMPT, "target": TARGET}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    n_targets = len(ss.load_model(folder).tokenize(TARGET).ids)

    def run(*extra):
        before = count.targets
        assert _batch(folder, prompts, out, *extra) == cli.EXIT_OK
        return _statuses(out)[-1], count.targets - before, display.load(out / "a.json", with_meta=True)

    status, targets, (result, meta) = run()
    assert (status, targets, result.matrices, meta["fingerprint"]["matrices"]) == ("done", 1, {}, False)
    assert run()[:2] == ("skipped", 0)                       # same span-only request: reused
    assert run("--span", "0:2")[:2] == ("done", 1)           # another span: a span-only row cannot answer it
    assert run("--span", "0:2")[:2] == ("skipped", 0)
    status, targets, (result, meta) = run("--per-token")    # matrices needed: the span-only row is redone
    assert (status, targets, set(result.matrices), meta["fingerprint"]["matrices"]) == \
        ("done", n_targets, {"grad_x_input"}, True)
    assert run()[:2] == ("skipped", 0)                       # a full row answers a span-only run ...
    assert run("--span", "1:3", "--html")[:2] == ("html", 0)  # ... for any span, HTML too
    assert "tokens 1:3" in (out / "a.html").read_text(encoding="utf-8")
    assert run("--per-token")[:2] == ("skipped", 0)

    # A row written before span-only runs existed (no "matrices" in its fingerprint) holds matrices.
    obj = json.loads((out / "a.json").read_text(encoding="utf-8"))
    del obj["meta"]["fingerprint"]["matrices"]
    (out / "a.json").write_text(json.dumps(obj), encoding="utf-8")
    assert run()[:2] == ("skipped", 0)
    assert run("--per-token")[:2] == ("skipped", 0)


def test_batch_rejects_heatmap_with_what_to_do(folder, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": PROMPT}) + "\n", encoding="utf-8")
    assert _batch(folder, prompts, tmp_path / "o", "--heatmap", "x.png") == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--per-token" in err and "show OUT/<id>.json --heatmap" in err


@pytest.mark.parametrize("saved, wanted, expected", [
    ({"row": 1, "settings": 2, "matrices": True}, {"row": 1, "settings": 2, "matrices": False}, True),
    ({"row": 1, "settings": 2}, {"row": 1, "settings": 2, "matrices": True}, True),
    ({"row": 1, "settings": 2, "matrices": False}, {"row": 1, "settings": 2, "matrices": True}, False),
    ({"row": 1, "settings": 2, "matrices": False}, {"row": 1, "settings": 2, "matrices": False}, None),
    ({"row": 1, "settings": 3, "matrices": True}, {"row": 1, "settings": 2, "matrices": False}, False),
    (None, {"row": 1, "settings": 2, "matrices": False}, False),
])
def test_reusable_rules(saved, wanted, expected):
    assert cli.reusable(saved, wanted) is expected


# ----------------------------------------------------------------------------
# compare: two salience runs and one teacher-forced forward


def test_compare_is_two_explanations_and_one_forward(folder, reference, count, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert cli.main(["compare", "--model", folder, "--prompt-a", PROMPT, "--prompt-b", "The capital of Italy is",
                     "--target-a", TARGET, "--target-b", " Rome.", "--json", str(out)]) == cli.EXIT_OK
    assert (count.backwards, count.forwards) == (2, 3)
    obj = json.loads(out.read_text(encoding="utf-8"))
    # Side A is the explain run of the same pair: its log-probs are the reference's.
    np.testing.assert_allclose(obj["cross"]["under_a"]["logprobs"], reference.target_logprobs, rtol=1e-5, atol=1e-6)
    assert obj["cross"]["under_a"]["response"] == TARGET and obj["response_b"] == " Rome."
    printed = capsys.readouterr().out
    assert f"Δ log p = {obj['cross']['delta']:+.3f}" in printed
    assert "Response A: [- Paris. The capital of Italy is -]Rome." in printed  # the deleted words marked
    # The same response under both prompts: no forward beyond the two explanations.
    count.forwards = count.backwards = 0
    assert cli.main(["compare", "--model", folder, "--prompt-a", PROMPT, "--prompt-b", "The capital of Italy is",
                     "--target-a", TARGET, "--same-response", "--quiet"]) == cli.EXIT_OK
    assert (count.backwards, count.forwards) == (2, 2)


@pytest.mark.parametrize("args, message", [
    (["--prompt-a", "x"], "--prompt-b TEXT or --file-b PATH"),
    (["--prompt-a", "x", "--prompt-b", "y", "--file-b", "f.txt"], "both give prompt B"),
    (["--prompt-a", "x", "--prompt-b", "  "], "--prompt-b is empty"),
    (["--prompt-a", "x", "--prompt-b", "y", "--method", "grad_norm,grad_x_input"], "one method"),
    (["--prompt-a", "x", "--prompt-b", "y", "--target-b", "z", "--same-response"], "pass one of them"),
])
def test_compare_bad_flags_exit_2_before_loading(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare"] + args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "Loading model" not in err


def test_show_draws_a_heatmap_at_the_default_granularity(folder, tmp_path):
    """`show` leaves --granularity unset (a segment method's own is its default); a heatmap still gets words."""
    saved, png = tmp_path / "full.json", tmp_path / "map.png"
    assert _explain(folder, "--per-token", "--json", str(saved)) == cli.EXIT_OK
    assert cli.main(["show", str(saved), "--heatmap", str(png)]) == cli.EXIT_OK
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
