"""Share this view (display/share.py): the written HTML, read back with html.parser, holds the result's values;
its notebook cell, executed, recomputes the same values. A tiny random Llama saved as a folder, so that the
cell's ss.load_model(folder) loads the very model that made the result."""

from __future__ import annotations

import html.parser

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import explain
from sequence_salience.display import share
from sequence_salience.display.plot import segment_matrix
from sequence_salience.display.view import make_view
from tests.unit.tiny_models import save_tiny_llama

PROMPT = "Alice has three apples <and> Bob has two. How many & why?"
TARGET = " Five apples. Alice"


class _Page(html.parser.HTMLParser):
    """Collects the shared page's values: map segments, matrix cells by row, faithfulness AOPCs, the about list,
    the notebook cell, and every tag and attribute (for the offline check)."""

    def __init__(self) -> None:
        super().__init__()
        self.segments: dict[int, float] = {}
        self.matrix: dict[int, list[float]] = {}
        self.faith: dict[tuple[str, str], float] = {}
        self.about: dict[str, str] = {}
        self.cell = ""
        self.tags: list[tuple[str, dict]] = []
        self._row: int | None = None
        self._faith_row: tuple[str, str] | None = None
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        cls = a.get("class") or ""
        if tag == "span" and "ss-seg" in cls and "data-value" in a:
            self.segments[int(a["data-s"])] = float(a["data-value"])
        elif tag == "tr" and "data-row" in a:
            self._row = int(a["data-row"])
            self.matrix[self._row] = []
        elif tag == "tr" and "data-mode" in a:
            self._faith_row = (a["data-mode"], a["data-name"])
        elif tag == "td" and "data-value" in a and self._row is not None:
            self.matrix[self._row].append(float(a["data-value"]))
        elif tag == "td" and "data-value" in a and self._faith_row is not None:
            self.faith.setdefault(self._faith_row, float(a["data-value"]))  # the first: the AOPC
        elif tag == "dd":
            self._in = cls.removeprefix("ss-about-")
        elif tag == "pre" and "ss-cell" in cls:
            self._in = "cell"

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = self._faith_row = None
        if tag in ("dd", "pre"):
            self._in = None

    def handle_data(self, data):
        if self._in == "cell":
            self.cell += data
        elif self._in:
            self.about[self._in] = self.about.get(self._in, "") + data


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="module")
def lm(folder) -> ss.LanguageModel:
    return ss.load_model(folder)


def _parse(path) -> _Page:
    page = _Page()
    page.feed(open(path, encoding="utf-8").read())
    return page


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
