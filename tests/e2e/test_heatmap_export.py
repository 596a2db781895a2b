"""Issue 45 §1 and §7 in the browser at 1280x720, against the real server on the default model: the answer x
prompt matrix researchers know (the answer's earlier tokens as columns, numbers in the cells, rows and columns
at the granularity shown), its exports (CSV, PNG) and "Share this view" (the standalone page of what is on
screen, from lit_app/wrappers/share.py)."""

from __future__ import annotations

import csv
import io
import math

import pytest

from tests.e2e import plugin_checks
from tests.share_page import parse_share_page

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 300_000
SIMPLE = "What is the capital of France?"


def _number(title: str) -> float:
    """The value at the end of a cell's tooltip ('"." ← "Paris": 1.234')."""
    return float(title.rsplit(":", 1)[1].strip().replace("−", "-"))


def _open_heatmap(page, server_url):
    mod = plugin_checks.open_and_select(page, server_url, SIMPLE)
    mod.locator("button.view-toggle").click()
    table = mod.locator("table.heatmap")
    table.wait_for(timeout=TIMEOUT_MS)  # once the per-token matrices are there
    return mod, table


def _download(page, button) -> bytes:
    with page.expect_download() as info:
        button.click()
    return open(info.value.path(), "rb").read()


def _csv(page, mod) -> list[list[str]]:
    return list(csv.reader(io.StringIO(_download(page, mod.locator("button.heatmap-csv")).decode("utf-8"))))


def test_prefix_columns_numbers_and_granularity(server_url, browser_page):
    page, _ = browser_page
    mod, table = _open_heatmap(page, server_url)
    rows = table.locator("tr.hrow")
    # Numbers on by default where the cells can hold them (frontend/src/salience/heatmap/export.ts numbersFit:
    # 180 px of row labels + 56 px a cell): not the system prompt's and question's 20 words in the module's
    # 856 px at 1280x720, yes for their sentences; each number is its tooltip's.
    def numbers_shown() -> bool:
        return "numbers" in table.get_attribute("class").split()

    width, n_cols = mod.evaluate("e => [e.getBoundingClientRect().width, e.renderRoot.querySelectorAll('th.col').length]")
    assert numbers_shown() == (180 + 56 * n_cols <= width), (width, n_cols)
    mod.locator("select.granularity").select_option("sentence")
    assert numbers_shown(), mod.evaluate("e => [e.getBoundingClientRect().width, e.renderRoot.querySelectorAll('th.col').length]")
    tds = rows.nth(0).locator("td").all()
    assert tds
    for td in tds:
        assert td.inner_text().strip() == td.get_attribute("title").rsplit(":", 1)[1].strip()
    mod.locator("input.heatmap-numbers").uncheck()
    assert not numbers_shown() and rows.nth(0).locator("td").first.inner_text().strip() == ""
    mod.locator("select.granularity").select_option("word")

    # The answer's "." explained: its top list ranks response words; with the prefix columns on, each of those
    # has a column "<word> (resp.)" whose cell in the "." row holds the top list's value.
    labels = rows.locator("th").all_inner_texts()
    dot = max(i for i, label in enumerate(labels) if label == ".")
    rows.nth(dot).click()
    mod.locator("input.heatmap-prefix").check()
    heads = table.locator("th.col").all_inner_texts()
    top = mod.locator(".top .top-item").evaluate_all(
        "els => els.map(e => [e.querySelector('.top-text').textContent.trim(), !!e.querySelector('.where'),"
        " Number(e.dataset.value)])")
    resp = [(text, value) for text, where, value in top if where]
    assert resp, f"no response word in the top list of the answer's '.': {top}"
    for text, value in resp:
        assert f"{text} (resp.)" in heads, (text, heads)
        cell = rows.nth(dot).locator("td").nth(heads.index(f"{text} (resp.)"))
        assert _number(cell.get_attribute("title")) == pytest.approx(value, rel=2e-3, abs=1e-4), (text, value)
    # A row's own and later tokens are blank: the first row has no value under any response column.
    first = rows.nth(0).locator("td.resp").all()
    assert first and all(td.get_attribute("style") in ("", None) for td in first)

    # Word columns sum the token columns: per row, the prompt's total is the same at both granularities.
    def prompt_totals() -> list[float]:
        data = _csv(page, mod)
        keep = [j for j, h in enumerate(data[0]) if j > 0 and not h.endswith("(resp.)")]
        return [sum(float(r[j]) for j in keep if r[j] != "") for r in data[1:]]

    mod.locator("select.granularity").select_option("word")
    words = prompt_totals()
    mod.locator("select.granularity").select_option("token")
    tokens = prompt_totals()
    assert len(words) == len(tokens) == len(labels)
    assert words == pytest.approx(tokens, rel=1e-4, abs=1e-6)


def test_csv_png_and_share_this_view_download_what_is_on_screen(server_url, browser_page):
    page, external = browser_page
    mod, table = _open_heatmap(page, server_url)
    mod.locator("select.granularity").select_option("word")
    mod.locator("input.heatmap-prefix").check()
    rows = table.locator("tr.hrow")
    n_rows, n_cols = rows.count(), table.locator("th.col").count()

    # CSV: one line per row, one field per column, the tooltips' values at full precision.
    data = _csv(page, mod)
    assert len(data) == 1 + n_rows and all(len(r) == 1 + n_cols for r in data)
    for j, td in enumerate(rows.nth(n_rows - 1).locator("td").all()):
        field = data[n_rows][1 + j]
        if field != "":
            assert float(field) == pytest.approx(_number(td.get_attribute("title")), rel=1e-3, abs=1e-4)

    # PNG: an image as wide as the columns drawn.
    png = _download(page, mod.locator("button.heatmap-png"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(png[16:20], "big")
    assert width > n_cols * 18

    # Share this view (keyboard: focus and Enter): the standalone page, offline, with the same numbers.
    share = mod.locator("button.share-view")
    share.focus()
    with page.expect_download(timeout=TIMEOUT_MS) as info:
        page.keyboard.press("Enter")
    page_ = parse_share_page(open(info.value.path(), encoding="utf-8").read())
    assert not [t for t, a in page_.tags if t in ("script", "link", "img", "iframe")]
    assert not [a for _, a in page_.tags if "src" in a or "href" in a]
    assert SIMPLE in page_.about.get("prompt", "")
    assert len(page_.matrix) == n_rows  # the whole response: one row per answer token
    for i, r in enumerate(data[1:]):
        ours = sum(float(v) for v in r[1:] if v != "")
        assert sum(v for v in page_.matrix[i] if not math.isnan(v)) == pytest.approx(ours, rel=1e-3, abs=1e-4), i
    assert not external, external  # nothing left this machine
