"""Share this view (display/share.py): the written HTML, read back with html.parser, holds the result's values;
its notebook cell, executed, recomputes the same values. A tiny random Llama saved as a folder, so that the
cell's ss.load_model(folder) loads the very model that made the result."""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import ablation, explain
from sequence_salience.display import share
from sequence_salience.display.plot import segment_matrix
from sequence_salience.display.view import make_view
from sequence_salience.errors import SalienceError
from sequence_salience.methods import ablation_surrogate, leave_one_out
from tests.share_page import SharePage, parse_share_page
from tests.unit.tiny_models import save_tiny_llama

PROMPT = "Alice has three apples <and> Bob has two. How many & why?"
SENTENCES = "Alice has three apples. Bob has two apples. Carol has none.\nHow many apples are there?"
TARGET = " Five apples. Alice"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="module")
def lm(folder) -> ss.LanguageModel:
    return ss.load_model(folder)


def _parse(path) -> SharePage:
    return parse_share_page(open(path, encoding="utf-8").read())


@pytest.mark.parametrize("method,granularity", [
    pytest.param("grad_x_input", "word", id="grad_x_input-word"),
    pytest.param("grad_norm", "sentence", id="grad_norm-sentence"),
    pytest.param("integrated_gradients", "token", id="ig-token"),
])
def test_shared_page_holds_the_results_values(lm, folder, tmp_path, method, granularity):
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=(method,),
                                 config=ss.SalienceConfig(ig_steps=8))
    path = share.write_share(result, tmp_path / "view.html", method, granularity, (1, 4), model=folder)
    page = _parse(path)
    view = make_view(result, method, granularity, (1, 4))
    drawn = {p.seg for p in view.pieces}  # a special token with no text (BOS) is no piece
    shown = {s: v for s, v in enumerate(view.values.tolist()) if np.isfinite(v) and s in drawn}
    assert page.segments.keys() == shown.keys() and len(shown) > 3
    np.testing.assert_allclose(list(page.segments.values()), list(shown.values()), rtol=1e-8)  # 9 digits
    values, rows, _, _ = segment_matrix(result, method, granularity, (1, 4), include_response=True)
    assert len(page.matrix) == len(rows) == 3
    np.testing.assert_allclose(np.array([page.matrix[i] for i in range(3)]), values, rtol=1e-8, atol=1e-12)
    assert page.about["prompt"] == PROMPT and page.about["answer"] == TARGET
    assert page.about["model"] == folder and page.about["method"].endswith(f"({method})")
    # offline: no script, no link, no external source
    assert not [t for t, a in page.tags if t in ("script", "link", "img", "iframe")]
    assert not [a for _, a in page.tags if "src" in a or "href" in a]


def test_notebook_cell_reproduces_the_values(lm, folder, tmp_path):
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_x_input",))
    page = _parse(share.write_share(result, tmp_path / "view.html", "grad_x_input", "word", model=folder))
    assert page.cell.startswith("import sequence_salience as ss")
    namespace: dict = {}
    exec(compile(page.cell, "<shared cell>", "exec"), namespace)  # pylint: disable=exec-used
    again = namespace["result"]
    np.testing.assert_array_equal(again.ids, result.ids)
    np.testing.assert_allclose(again.matrices["grad_x_input"], result.matrices["grad_x_input"], rtol=1e-6,
                               atol=1e-9)
    view = make_view(again, "grad_x_input", "word")
    np.testing.assert_allclose([view.values[s] for s in page.segments], list(page.segments.values()), rtol=1e-6)


def test_span_only_result_says_it_has_no_matrix_and_its_cell_computes_the_span(lm, folder, tmp_path):
    result = ss.compute_span_result(lm, PROMPT, TARGET, methods=("grad_x_input",), t0=0, t1=2)
    page = _parse(share.write_share(result, tmp_path / "view.html", "grad_x_input", "word", (0, 2), model=folder))
    assert not page.matrix
    assert any("ss-no-matrix" in (a.get("class") or "") for _, a in page.tags)
    namespace: dict = {}
    exec(compile(page.cell, "<shared cell>", "exec"), namespace)  # pylint: disable=exec-used
    np.testing.assert_allclose(namespace["result"].span_salience("grad_x_input", 0, 2),
                               result.span_salience("grad_x_input", 0, 2), rtol=1e-6, atol=1e-9)


def test_faithfulness_table_holds_the_reports_aopc(lm, folder, tmp_path):
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_x_input",))
    report = explain.faithfulness_curves(lm, explain.CurvesRequest(
        PROMPT, TARGET, ("grad_x_input",), result=result,
        config=explain.FaithfulnessConfig(granularity="word", steps=3, n_random=2)))
    page = _parse(share.write_share(result, tmp_path / "view.html", "grad_x_input", "word", model=folder,
                                    faithfulness=report))
    expected = {(r["mode"], r["name"]): r["aopc"] for r in report.table()}
    assert page.faith.keys() == expected.keys() and len(expected) >= 2
    np.testing.assert_allclose([page.faith[k] for k in expected], list(expected.values()), rtol=1e-8)


def test_cli_explain_and_show_write_the_same_page(lm, folder, tmp_path):
    from sequence_salience import cli  # pylint: disable=import-outside-toplevel

    page_path, saved = tmp_path / "cli.html", tmp_path / "r.json"
    assert cli.main(["explain", "--model", folder, "--prompt", PROMPT, "--target", TARGET, "--method", "grad_x_input",
                     "--per-token", "--quiet", "--json", str(saved), "--share", str(page_path)]) == cli.EXIT_OK
    page = _parse(page_path)
    result = ss.SalienceResult.load(saved)
    values, _, _, _ = segment_matrix(result, "grad_x_input", "word", include_response=True)
    np.testing.assert_allclose(np.array([page.matrix[i] for i in range(len(page.matrix))]), values, rtol=1e-8,
                               atol=1e-12)
    assert page.about["model"] == folder
    again = tmp_path / "show.html"
    assert cli.main(["show", str(saved), "--share", str(again)]) == cli.EXIT_OK
    shown = _parse(again)  # the loaded arrays are exact; sums over them may differ in the last bits
    assert (shown.about, shown.cell, shown.segments.keys()) == (page.about, page.cell, page.segments.keys())
    np.testing.assert_allclose(list(shown.segments.values()), list(page.segments.values()), rtol=1e-6)
    np.testing.assert_allclose([shown.matrix[i] for i in shown.matrix], [page.matrix[i] for i in page.matrix],
                               rtol=1e-6, atol=1e-9)


def test_cli_share_of_a_file_without_its_model_names_the_fix(lm, tmp_path, capsys):
    from sequence_salience import cli  # pylint: disable=import-outside-toplevel

    path = tmp_path / "bare.json"
    ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_x_input",)).to_json(path)
    assert cli.main(["show", str(path), "--share", str(tmp_path / "x.html")]) == cli.EXIT_USAGE
    assert "write_share(result, path, model=...)" in capsys.readouterr().err


def _by_segment(seg) -> dict[int, float]:
    """A SegmentSalience's values by segment index of its segmentation (the reference the page is checked against)."""
    return {int(s): float(v) for s, v in zip(seg.segment_index, seg.values)}


@pytest.mark.parametrize("method,config", [
    pytest.param(leave_one_out.NAME, ablation.AblationConfig(removal="delete"), id="leave_one_out-delete"),
    pytest.param(ablation_surrogate.NAME, ablation.AblationConfig(surrogate_masks=12, seed=3), id="surrogate"),
])
def test_a_segment_methods_view_is_shared_with_its_values_as_one_row_and_a_cell_that_measures_them(
        lm, folder, tmp_path, method, config):
    seg = ablation.segment_salience(lm, SENTENCES, TARGET, method, granularity="sentence", span=(0, 2), config=config)
    page = _parse(share.write_share(seg, tmp_path / "view.html", model=folder, ablation=config))
    expected = _by_segment(seg)
    assert len(expected) >= 3 and page.segments.keys() >= expected.keys()
    # The map spreads each value over its tokens (float32) and sums them back: equal to float32's precision.
    np.testing.assert_allclose([page.segments[s] for s in expected], list(expected.values()), rtol=1e-6, atol=1e-9)
    # The matrix: one row (the span), one column per prompt sentence, each cell the segment's own value.
    assert list(page.matrix) == [0] and page.columns == sorted(expected)
    np.testing.assert_allclose(page.matrix[0], [expected[s] for s in page.columns], rtol=1e-6, atol=1e-9)
    assert page.about["granularity"] == "sentences" and page.about["method"].endswith(f"({method})")
    assert page.about["explained"].startswith("tokens 0:2")
    if method == ablation_surrogate.NAME:  # R² where it applies
        assert page.about["fit"].startswith("fit on held-out ablations: R²") and "R²" in page.about["fit"]
    else:
        assert "fit" not in page.about
    assert "forward rows (removal: " + config.removal in page.about["measured"]
    # The cell measures the same values again with the library (same tokens, same settings).
    assert "segment_salience(lm, prompt, target, " + repr(method) in page.cell
    namespace: dict = {}
    exec(compile(page.cell, "<shared cell>", "exec"), namespace)  # pylint: disable=exec-used
    again = namespace["result"]
    assert again.method == method and again.span == (0, 2)
    np.testing.assert_allclose([_by_segment(again)[s] for s in page.columns], page.matrix[0], rtol=1e-6, atol=1e-9)


def test_a_segment_method_at_another_granularity_is_refused_naming_the_fix(lm, folder):
    seg = ablation.segment_salience(lm, SENTENCES, TARGET, leave_one_out.NAME, granularity="sentence")
    with pytest.raises(SalienceError, match="live on sentence segments.*Fix: show them at granularity 'sentence'"):
        share.share_html(seg, leave_one_out.NAME, "word", model=folder)


def _curves_payload(report) -> dict:
    """The explain wrapper's curves payload as the browser holds it (lit_app/wrappers/explain.py: rounded rows)."""
    return {"table": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in report.table()],
            "granularity": report.granularity, "removal": report.removal, "span": list(report.span),
            "curves": {"ignored": True}}


def test_the_faithfulness_payload_the_browser_holds_is_shown_and_the_shown_methods_rows_marked(lm, folder, tmp_path):
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm", "grad_x_input"))
    report = explain.faithfulness_curves(lm, explain.CurvesRequest(
        PROMPT, TARGET, ("grad_norm", "grad_x_input"), result=result,
        config=explain.FaithfulnessConfig(granularity="word", steps=3, n_random=2)))
    page = _parse(share.write_share(result, tmp_path / "view.html", "grad_x_input", "word", model=folder,
                                    faithfulness=_curves_payload(report)))
    expected = {(r["mode"], r["name"]): r["aopc"] for r in report.table()}
    assert page.faith.keys() == expected.keys()
    np.testing.assert_allclose([page.faith[k] for k in expected], list(expected.values()), rtol=1e-6, atol=1e-6)
    assert page.shown_faith == [k for k in expected if k[1].split(":")[0] == "grad_x_input"] and page.shown_faith


@pytest.mark.parametrize("payload,match", [
    pytest.param({"granularity": "word", "removal": "filler"}, "no 'table' rows", id="no-table"),
    pytest.param({"table": [{"mode": "deletion", "name": "g", "aopc": "1", "random_aopc": 0, "random_std": 0,
                             "length_aopc": 0, "verdict": "x"}], "granularity": "word", "removal": "filler"},
                 r"table\[0\]\.'aopc' is '1'", id="aopc-text"),
    pytest.param({"table": [{"mode": "deletion", "name": "g", "aopc": 1, "random_aopc": 0, "random_std": 0,
                             "length_aopc": 0, "verdict": "x"}], "granularity": "word", "removal": "filler",
                  "span": [0, 1]}, r"tested target tokens 0:1, the view explains 0:\d+\. Fix: run the test on the target shown", id="other-span"),
    pytest.param(["not", "a", "mapping"], "Fix: pass an explain.FaithfulnessReport", id="list"),
])
def test_a_faithfulness_payload_that_does_not_fit_is_refused_naming_the_fix(lm, folder, payload, match):
    result = ss.compute_salience(lm, PROMPT, TARGET, methods=("grad_norm",))
    with pytest.raises(SalienceError, match=match):
        share.share_html(result, "grad_norm", "word", model=folder, faithfulness=payload)


def test_cli_shares_a_segment_methods_view_with_its_faithfulness_test(lm, folder, tmp_path, capsys):
    from sequence_salience import cli  # pylint: disable=import-outside-toplevel

    path, saved = tmp_path / "loo.html", tmp_path / "loo.json"
    assert cli.main(["explain", "--model", folder, "--prompt", SENTENCES, "--target", TARGET, "--raw", "--method",
                     "leave_one_out", "--granularity", "sentence", "--quiet", "--json", str(saved), "--share", str(path),
                     "--faithfulness", "--steps", "2"]) == cli.EXIT_OK
    page = _parse(path)
    raw = lm.format_prompt(SENTENCES, chat=False)  # --raw
    seg = ablation.segment_salience(lm, raw, TARGET, leave_one_out.NAME, granularity="sentence")
    assert page.columns and list(page.matrix) == [0]  # one row, each sentence's value
    np.testing.assert_allclose(page.matrix[0], [_by_segment(seg).get(s, 0.0) for s in page.columns], rtol=1e-6,
                               atol=1e-9)
    report = explain.faithfulness_curves(lm, explain.CurvesRequest(
        raw, TARGET, (leave_one_out.NAME,), config=explain.FaithfulnessConfig(granularity="sentence", steps=2)))
    expected = {(r["mode"], r["name"]): r["aopc"] for r in report.table()}
    assert page.faith.keys() == expected.keys() and set(page.shown_faith) == set(expected)
    np.testing.assert_allclose([page.faith[k] for k in expected], list(expected.values()), rtol=1e-6, atol=1e-9)
    assert cli.main(["explain", "--model", folder, "--prompt", SENTENCES, "--faithfulness"]) == cli.EXIT_USAGE
    assert "Fix: add --share PATH" in capsys.readouterr().err


def test_cli_show_shares_a_saved_surrogate_with_the_settings_it_was_measured_with(lm, folder, tmp_path):
    from sequence_salience import cli  # pylint: disable=import-outside-toplevel

    saved, page_path = tmp_path / "s.json", tmp_path / "s.html"
    assert cli.main(["explain", "--model", folder, "--prompt", SENTENCES, "--target", TARGET, "--raw", "--method",
                     ablation_surrogate.NAME, "--ablations", "9", "--removal", "delete", "--granularity", "sentence",
                     "--quiet", "--json", str(saved)]) == cli.EXIT_OK
    assert cli.main(["show", str(saved), "--share", str(page_path)]) == cli.EXIT_OK
    page = _parse(page_path)
    assert "'surrogate_masks': 9" in page.cell and "'removal': 'delete'" in page.cell
    namespace: dict = {}
    exec(compile(page.cell, "<shared cell>", "exec"), namespace)  # pylint: disable=exec-used
    again = _by_segment(namespace["result"])
    np.testing.assert_allclose([again.get(s, 0.0) for s in page.columns], page.matrix[0], rtol=1e-6, atol=1e-9)
