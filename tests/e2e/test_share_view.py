"""Issue 45 §7 in the browser at 1280x720, against the real server on the default model: "Share this view" of a
segment method's map (leave one sentence out on the simple question) after the faithfulness test ran on the same
target. The downloaded page, opened in Chromium, holds the model, prompt, answer, method, granularity, the map's values
(the module's top list), the matrix (the module's heatmap row), the faithfulness figures (the Test tab's AOPC table);
its notebook cell, run in this process with the library, measures the same values again. The page's screenshot:
artifacts/e2e/share-page.png (docs/share.png too when UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

SIZE = plugin_checks.SMALL_SCREEN
TIMEOUT_MS = 300_000
SIMPLE = "What is the capital of France?"
LOO = "leave_one_out"


def _number(title: str) -> float:
    """The value at the end of a heatmap cell's tooltip ('"…" ← "What is …": 1.234')."""
    return float(title.rsplit(":", 1)[1].strip().replace("−", "-"))


def _leave_one_sentence_out(page, mod) -> None:
    """Sentences on screen, and leave one sentence out's map once measured (the automatic switch)."""
    from playwright.sync_api import expect

    if mod.locator("select.granularity").input_value() != "sentence":
        mod.locator("select.granularity").select_option("sentence")
    mod.locator(f'.segment-status[data-method="{LOO}"]').wait_for(timeout=TIMEOUT_MS)
    expect(mod.locator("select.method")).to_have_value(LOO)


def _faithfulness_of_leave_one_out(page) -> dict[tuple[str, str], float]:
    """Runs the Test tab's curves for leave one out beside gradient norm (3 steps, at the module's sentences); its AOPC
    table by (mode, ordering)."""
    plugin_checks.open_tab(page, "Test this explanation")
    explain = page.locator(plugin_checks.EXPLAIN_TAG)
    explain.locator("input.steps").fill("3")
    explain.locator("input.steps").dispatch_event("change")
    explain.locator("label.method", has_text="Gradient × input").locator("input").uncheck()
    explain.locator("label.method", has_text="Leave one segment out").locator("input").check()
    explain.locator("button.run.curves").click()
    explain.locator(f'.curves.final svg.chart.deletion path.line.method[data-method="{LOO}"]').wait_for(
        timeout=TIMEOUT_MS)
    aopc = {}
    for mode in ("deletion", "insertion"):
        for row in explain.locator(f"table.aopc.{mode} tr[data-method]").all():
            aopc[(mode, row.get_attribute("data-method"))] = float(row.locator("td").nth(1).inner_text())
    return aopc


def test_share_a_leave_one_out_view_with_its_faithfulness_test(server_url, browser_page, artifacts_dir):
    page, external = browser_page
    mod = plugin_checks.open_lit(page, server_url, SIZE)
    mod.locator("select.granularity").select_option("sentence")
    plugin_checks.select_and_wait(page, SIMPLE)
    _leave_one_sentence_out(page, mod)
    aopc = _faithfulness_of_leave_one_out(page)
    assert {("deletion", LOO), ("insertion", LOO)} <= aopc.keys(), aopc
    plugin_checks.open_tab(page, "Sequence Salience")
    _leave_one_sentence_out(page, mod)

    # What is on screen: the response, the top list's values, the heatmap's one row (the segment method's).
    response = mod.locator(".response").inner_text().strip()
    top = {int(s): float(v) for s, v in mod.locator(".top .top-item").evaluate_all(
        "els => els.map(e => [e.dataset.s, e.dataset.value])")}
    assert top, "no top list for leave one sentence out"
    mod.locator("button.view-toggle").click()
    if mod.locator("input.heatmap-prefix").is_checked():
        mod.locator("input.heatmap-prefix").uncheck()
    rows = mod.locator("table.heatmap tr.hrow")
    rows.first.wait_for(timeout=TIMEOUT_MS)
    assert rows.count() == 1  # a segment method measures one target span at a time
    cells = [td.get_attribute("title") for td in rows.first.locator("td").all()]

    with page.expect_download(timeout=TIMEOUT_MS) as info:
        mod.locator("button.share-view").click()
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()

    # The written file, opened in Chromium at 1280x720 (a new tab, as a colleague would open it).
    view = page.context.new_page()
    view.set_viewport_size(SIZE)
    written = artifacts_dir / "share-page.html"  # with its name's .html: Chromium opens it as a page
    info.value.save_as(written)
    view.goto(written.as_uri())
    about = {k: view.locator(f"dd.ss-about-{k}").inner_text()
             for k in ("model", "prompt", "answer", "method", "granularity", "measured")}
    assert about["model"] == "default"  # what ss.load_model is given: the cell loads the same model
    assert SIMPLE in about["prompt"] and about["answer"].strip() == response
    assert about["method"] == f"Leave one segment out ({LOO})" and about["granularity"] == "sentences"
    assert about["measured"][:1].isdigit() and "forward rows" in about["measured"]
    segments = dict(view.locator(".ss-salience .ss-seg[data-value]").evaluate_all(
        "els => els.map(e => [Number(e.dataset.s), Number(e.dataset.value)])"))
    for s, v in top.items():  # the map: every top segment with the value on screen
        assert segments[s] == pytest.approx(v, rel=1e-4, abs=1e-6), s
    matrix = view.locator("table.ss-matrix")  # the heatmap: the module's one row, the same values
    matrix.scroll_into_view_if_needed()
    assert matrix.is_visible()
    columns = matrix.locator("th[data-s]").evaluate_all("els => els.map(e => Number(e.dataset.s))")
    row = matrix.locator("tr[data-row]").evaluate_all(
        "rows => rows.map(r => Array.from(r.querySelectorAll('td'), (td) => Number(td.dataset.value)))")
    assert len(row) == 1 and len(row[0]) == len(columns) == len(cells)
    for got, title in zip(row[0], cells):
        assert not math.isnan(got) and got == pytest.approx(_number(title), rel=2e-3, abs=1e-4), (got, title)
    faith = {(m, n): (float(v), shown) for m, n, v, shown in view.locator(
        "table.ss-faithfulness tr[data-mode]").evaluate_all(
        "rows => rows.map(r => [r.dataset.mode, r.dataset.name, r.querySelector('td[data-value]').dataset.value,"
        " r.classList.contains('ss-shown')])")}
    assert faith.keys() == aopc.keys()
    for key, figure in aopc.items():  # the faithfulness figures of the Test tab (3 decimals there)
        assert faith[key][0] == pytest.approx(figure, abs=6e-4), key
        assert faith[key][1] == (key[1].split(":")[0] == LOO), key  # the method shown: its rows in bold
    assert view.locator("script, link, img, iframe, [src], [href]").count() == 0  # opens offline
    cell = view.locator("pre.ss-cell").inner_text()
    view.screenshot(path=str(artifacts_dir / "share-page.png"), full_page=True)
    plugin_checks.doc_picture(artifacts_dir / "share-page.png", "share.png")
    assert not external, external  # nothing left this machine

    # The notebook cell, run with the library in this process: the same model measures the same values.
    namespace: dict = {}
    exec(compile(cell, "<shared cell>", "exec"), namespace)  # pylint: disable=exec-used
    again = {int(s): float(v) for s, v in zip(namespace["result"].segment_index, namespace["result"].values)}
    assert again and again.keys() <= set(columns)  # each measured sentence is a column (the rest are 0)
    np.testing.assert_allclose([again.get(s, 0.0) for s in columns], row[0], rtol=1e-3, atol=1e-4)
