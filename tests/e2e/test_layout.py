"""The screen a researcher reads (issue 19): the default layout at 1280x720, 1440x900 and 1920x1080.

Flow: open the page at 1280x720, check that the data table shows one row per case study with the
columns that matter (case, prompt, target; no sideways scrolling, before or after a row click),
select the constitutional-principles case study (a system prompt
and a chat template before the user's question), and check with bounding boxes that the user's
question and the response are inside the viewport and inside the prompt / response boxes'
visible areas (not scrolled out); that the chat template and system prompt (where several of the top
words are) start open and fold on a click; that the top list shows at least 8 entries; that "Inside the model", a tab,
waits (computes nothing) until its tab is opened, then traces. Screenshots of each module (Sequence
Salience, Inside the model, Test this explanation) at the three sizes go to artifacts/e2e/layout/
(docs/screenshot.png too, from 1280x720, when UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import re

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

SALIENCE = "prompt-salience-module"
INSIDE = "inside-model-module"
EXPLAIN = "explain-test-module"
# The number of lines an element's text takes: distinct tops of its text's line boxes.
LINES_JS = """e => { const r = document.createRange(); r.selectNodeContents(e);
  return new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top))).size; }"""
# lit_app/data/case_studies.jsonl: a system prompt, then the user's menu and question.
CASE_ROW = "I don't eat garlic or onions. What should I order for dinner?"
QUESTION_FIRST, QUESTION_LAST = "Menu", "dinner"
SIZES = [(1280, 720), (1440, 900), (1920, 1080)]
# (LIT shortens a long cell: the start of each case name.)
CASES = ["few-shot classification", "chain-of-thought", "constitutional", "simple question"]
LOAD_TIMEOUT_MS = 240_000


def _segment(mod, part: str, word: str):
    seg = mod.locator(f".{part} .seg, .{part} .tgt").filter(has_text=word)
    assert seg.count() >= 1, f"no segment with {word!r} in the {part}"
    return seg.first


def test_prompt_and_response_in_view_at_1280x720(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    out = artifacts_dir / "layout"
    out.mkdir(exist_ok=True)
    page.set_viewport_size({"width": 1280, "height": 720})
    viewport = {"x": 0, "y": 0, "width": 1280, "height": 720}
    page.goto(server_url)
    sal = page.locator(SALIENCE)
    sal.wait_for(timeout=120_000)
    # The data table shows one row per case study (lit_app/data/case_studies.jsonl); the variants
    # (other targets, other prompts) are the dataset selector's case_study_variants.
    rows = page.locator("data-table-module tbody tr")
    for i, case in enumerate(CASES):
        expect(rows.nth(i)).to_contain_text(case)  # retried: LIT fills the cells after the rows
    expect(rows.filter(has_text=re.compile(r"\S"))).to_have_count(len(CASES))  # (LIT pads with empty rows)
    # The columns that matter fit the left panel (frontend/src/lit_fixes.ts patchDataTableColumns): the
    # system column starts hidden, and nothing scrolls sideways, not even after the click below
    # (Playwright brings the row's centre into view first: on an 850 px row that scrolled the table
    # onto the empty system column).
    expect(page.locator("data-table-module thead th")).to_have_text(["index", "case", "prompt", "target"],
                                                                     use_inner_text=True)
    row = page.locator("data-table-module tbody tr", has_text=CASE_ROW).first
    row.click()
    area = page.locator("data-table-module .module-results-area")
    scroll_left, scroll_width, client_width = area.evaluate("a => [a.scrollLeft, a.scrollWidth, a.clientWidth]")
    assert scroll_left == 0 and scroll_width <= client_width, (scroll_left, scroll_width, client_width)
    expect(row).to_have_class(re.compile("primary-selected"))
    plugin_checks.inside(row.locator("td").nth(2).bounding_box(), area.bounding_box(), "the selected row's prompt cell")
    plugin_checks.inside(row.locator("td").nth(3).bounding_box(), area.bounding_box(), "the selected row's target cell")
    page.screenshot(path=str(out / "table-1280x720.png"))
    page.locator(f"{SALIENCE}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    page.mouse.move(5, 5)

    # The user's question (its first and last words) and the response: on screen, not scrolled away.
    prompt_box = sal.locator(".prompt").bounding_box()
    response_box = sal.locator(".response").bounding_box()
    plugin_checks.inside(prompt_box, viewport, "the prompt box")
    plugin_checks.inside(response_box, viewport, "the response box")
    for word in (QUESTION_FIRST, QUESTION_LAST):
        plugin_checks.inside(_segment(sal, "prompt", word).bounding_box(), prompt_box, f"the question's {word!r}")
    targets = sal.locator(".response .tgt")
    assert targets.count() >= 2
    plugin_checks.inside(targets.first.bounding_box(), response_box, "the response's first segment")
    plugin_checks.inside(targets.last.bounding_box(), response_box, "the response's last segment")
    # At least 8 entries of the top list are on screen.
    items = sal.locator(".top li")
    assert items.count() >= 8
    plugin_checks.inside(items.nth(7).bounding_box(), viewport, "the 8th top-list entry")

    # The chat template and system prompt start open here, as several of the top list lie in the principles
    # (issue 35; tests/e2e/test_first_hour.py); a click folds them and another shows them again.
    head = sal.locator("details.head")
    assert head.count() == 1 and head.get_attribute("open") is not None
    system_word = _segment(sal, "prompt", "helpful")
    expect(system_word).to_be_visible()
    head.locator("summary").click()
    expect(system_word).to_be_hidden()
    head.locator("summary").click()
    expect(system_word).to_be_visible()

    # Regex granularity: the matches are ranked (the text between them is context), and the pattern
    # applies after a pause in typing, without Enter or leaving the box.
    sal.locator("select.granularity").select_option("regex")
    sal.locator("input.regex").fill(r"garlic|onions|dinner|risotto")
    expect(sal.locator(".side")).to_contain_text("Top custom regex")
    expect(sal.locator(".top li").first).to_contain_text(re.compile("garlic|onions|dinner|risotto"))
    tops = [t.strip() for t in sal.locator(".top .top-text").all_inner_texts()]
    assert tops and set(tops) <= {"garlic", "onions", "dinner", "risotto"}, tops
    sal.locator("select.granularity").select_option("word")

    # Inside the model is a tab: it waits, computing nothing, until its tab is opened.
    inside = page.locator(INSIDE)
    expect(inside).to_have_attribute("data-state", "waiting")

    def shots(w: int, h: int) -> None:
        page.set_viewport_size({"width": w, "height": h})
        # The table's columns fit its panel at every size (wider panels widen the prompt first).
        expect(area).to_have_js_property("scrollLeft", 0)
        fits = area.evaluate("a => a.scrollWidth <= a.clientWidth")
        assert fits, f"the data table scrolls sideways at {w}x{h}"
        page.locator(".tab", has_text="Sequence Salience").first.click()
        page.mouse.move(5, 5)
        page.screenshot(path=str(out / f"salience-{w}x{h}.png"))
        page.locator(".tab", has_text="Inside the model").first.click()
        page.locator(f"{INSIDE}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
        expect(inside.locator("tr.layer-row").first).to_be_visible()
        page.mouse.move(5, 5)
        page.screenshot(path=str(out / f"inside-{w}x{h}.png"))
        page.locator(".tab", has_text="Test this explanation").first.click()
        page.locator(EXPLAIN).wait_for(state="visible")
        # Its header: each test's tab label, the target's description and the forced-target label each
        # on one line (at 1280x720 they had wrapped to two and three lines beside each other).
        explain = page.locator(EXPLAIN)
        expect(explain.locator(".for")).to_contain_text("target: whole response")
        for item in [*explain.locator(".tabs .tab-btn").all(), explain.locator(".tabs .for"),
                     explain.locator(".tabs .forced-target")]:
            lines = item.evaluate(LINES_JS)
            assert lines == 1, f"{item.inner_text()!r} is on {lines} lines at {w}x{h}"
        page.mouse.move(5, 5)
        page.screenshot(path=str(out / f"explain-{w}x{h}.png"))

    for w, h in SIZES:
        shots(w, h)
    print(f"\nscreenshots: {out}")
    plugin_checks.doc_picture(out / "salience-1280x720.png", "screenshot.png")
