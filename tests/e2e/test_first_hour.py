"""Issue 35 in the browser at 1280x720, against the real server on the default model:

- point 8: the answer x prompt heatmap (rows: response tokens or segments, columns: prompt segments at
  the granularity shown; a click or the keyboard on a row retargets; Alt+H or the button toggles);
- point 7: the case studies work as case studies (the constitutional case's principles, where several of
  the top words are, are not folded away; the chain-of-thought row stating its answer's time is a strict
  xfail: not built yet, see its reason);
- point 9 (the compare view at 1280x720) is checked in tests/e2e/test_compare_module.py, which makes the same edit;
- point 1 (last part): every icon on the page renders as an icon offline, the salience module's error
  icon included (no ligature word such as "error_outline" on screen).

Screenshots go to artifacts/e2e/first_hour/ (docs/heatmap.png too when UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e import plugin_checks
from tests.server_process import REPO

pytestmark = pytest.mark.e2e

SALIENCE = "prompt-salience-module"
SIZE = plugin_checks.SMALL_SCREEN
VIEWPORT = {"x": 0, "y": 0, **SIZE}
TIMEOUT_MS = 300_000
SIMPLE = "What is the capital of France?"
COT = "A train leaves at 2:15 pm"
CONSTITUTIONAL = "I don't eat garlic or onions."
# The icons on the page, wherever they are (shadow roots included): elements in an icon font or with an
# icon class whose text is a ligature name, with their rendered width and font size.
ICONS_JS = """() => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      const cs = getComputedStyle(el);
      const iconish = /Material Icons/i.test(cs.fontFamily) || el.tagName === 'MWC-ICON' ||
          el.classList.contains('material-icon') || el.classList.contains('material-icons');
      const text = (el.textContent || '').trim();
      if (!iconish || !/^[a-z][a-z0-9_]{2,}$/.test(text)) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || cs.visibility === 'hidden') continue;
      out.push({tag: el.tagName, cls: el.className, text, width: r.width, font: parseFloat(cs.fontSize),
                family: cs.fontFamily});
    }
  };
  walk(document);
  return out;
}"""


def _shot(page, name: str) -> Path:
    page.mouse.move(5, 5)
    return plugin_checks.screenshot(page, REPO / "artifacts" / "e2e" / "first_hour", name)


def test_heatmap_rows_retarget_and_toggle(server_url, browser_page):
    from playwright.sync_api import expect

    page, external = browser_page
    mod = plugin_checks.open_and_select(page, server_url, SIMPLE)
    n_targets = mod.evaluate("e => e.payload.tokens.length - e.payload.n_prompt_tokens")
    # Words at first: the response's clickable segments in the text view, to compare with the segment rows.
    n_word_targets = mod.locator(".response .tgt").count()

    toggle = mod.locator("button.view-toggle")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(mod.locator(".text.prompt")).to_have_count(0)  # the heatmap replaces the text
    table = mod.locator("table.heatmap")
    table.wait_for(timeout=TIMEOUT_MS)  # once the per-token matrices are there
    rows = table.locator("tr.hrow")
    expect(rows).to_have_count(n_targets)  # one row per response token
    plugin_checks.top_on_screen(table.bounding_box(), VIEWPORT, "the heatmap")
    plugin_checks.inside(rows.first.locator("th").bounding_box(), VIEWPORT, "the first row's label")

    # Segment rows: the response's words, as many as the text view's clickable segments.
    mod.locator("select.heatmap-rows").select_option("segment")
    expect(rows).to_have_count(n_word_targets)
    mod.locator("select.heatmap-rows").select_option("token")
    expect(rows).to_have_count(n_targets)

    # Token columns: a cell is the matrix entry of its response token and prompt token (no aggregation).
    mod.locator("select.granularity").select_option("token")
    cols = table.locator("th.col").all_inner_texts()
    assert "capital" in cols, cols
    col = cols.index("capital")
    k_capital, method, entry = mod.evaluate("""e => {
      const p = e.payload;
      const k = p.tokens.findIndex((t, i) => i < p.n_prompt_tokens && t.trim() === 'capital');
      const method = e.renderRoot.querySelector('select.method').value;
      return [k, method, p.methods[method].matrix[1][k]];
    }""")
    assert k_capital >= 0
    title = rows.nth(1).locator("td").nth(col).get_attribute("title")
    shown = float(title.rsplit(":", 1)[1].strip().replace("−", "-"))
    assert shown == pytest.approx(entry, rel=2e-3, abs=1e-4), (method, title, entry)

    # A click on a row makes its token the target (and the top list follows).
    top_before = mod.locator(".top .top-text").all_inner_texts()
    rows.nth(2).click()
    expect(mod.locator(".target-desc")).to_have_text(f"token 3 of {n_targets}")
    expect(rows.nth(2)).to_have_class(re.compile(r"\bsel\b"))
    expect(rows.nth(2)).to_have_attribute("aria-pressed", "true")
    assert mod.locator(".top .top-text").all_inner_texts() != top_before
    # Keyboard: arrows move the target row, Escape goes back to the whole response.
    page.keyboard.press("ArrowDown")
    expect(mod.locator(".target-desc")).to_have_text(f"token 4 of {n_targets}")
    expect(rows.nth(3)).to_be_focused()
    page.keyboard.press("Escape")
    expect(mod.locator(".target-desc")).to_contain_text("whole response")
    mod.locator("select.granularity").select_option("word")
    rows.nth(min(5, n_targets - 1)).click()
    shot = _shot(page, "heatmap-1280x720")
    plugin_checks.doc_picture(shot, "heatmap.png")

    # Alt+H (the toggle's access key) goes back to the text, with the target kept.
    page.keyboard.press("Alt+h")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    expect(mod.locator(".text.prompt")).to_be_visible()
    assert mod.locator(".response .tgt.sel").count() >= 1
    assert not external, f"requests to non-local hosts: {external}"


def test_chain_of_thought_states_its_answer(server_url, browser_page):
    """The shipped row's own budget (192 tokens, lit_app/data/case_studies.jsonl) lets the default model reach
    its answer: it ends "The answer is 2:16." at about token 130 (143 tokens, then end of turn); at the old
    64 tokens it stopped mid-reasoning."""
    page, _ = browser_page
    # The response arrives at a time of day other than the start's 2:15 (right or wrong: the model's answer).
    mod = plugin_checks.open_and_select(page, server_url, COT)
    response = mod.locator(".response").inner_text()
    times = re.findall(r"\b(\d{1,2}:\d{2})\b", response)
    assert [t for t in times if t != "2:15"], f"the chain-of-thought response states no arrival time: {response!r}"
    _shot(page, "cot-1280x720")


def test_constitutional_principles_not_folded(server_url, browser_page):
    from playwright.sync_api import expect

    page, _ = browser_page
    # Several top words are in the system prompt (the principles), so it is shown, on screen.
    mod = plugin_checks.open_and_select(page, server_url, CONSTITUTIONAL)
    head = mod.locator("details.head")
    label = head.locator("summary").inner_text()
    n_ranked = int(re.search(r"\((\d+) of the top list\)", label).group(1))
    assert n_ranked >= 3, label  # HEAD_OPEN_RANKED (frontend/src/salience/text_pane.ts)
    expect(head).to_have_attribute("open", "")
    principle = mod.locator(".prompt .seg", has_text="Never").first
    expect(principle).to_be_visible()
    prompt_box = mod.locator(".prompt").bounding_box()
    plugin_checks.inside(principle.bounding_box(), prompt_box, "the first principle")
    plugin_checks.inside(prompt_box, VIEWPORT, "the prompt box")
    dinner = mod.locator(".prompt .seg", has_text="dinner").first
    plugin_checks.inside(dinner.bounding_box(), prompt_box, "the question's last word")
    _shot(page, "constitutional-1280x720")
    # The user can still fold it.
    head.locator("summary").click()
    expect(principle).to_be_hidden()


def test_icons_render_offline(server_url, browser_page):
    from playwright.sync_api import expect

    page, external = browser_page
    mod = plugin_checks.open_lit(page, server_url, SIZE)
    # One salience request fails (the server stays up): the module shows its error line with its icon.
    failed = []

    def fail_once(route) -> None:
        body = route.request.post_data or ""
        if not failed and "capital of France" in body:
            failed.append(route.request.url)
            route.fulfill(status=500, body="Simulated failure for the icon test")
        else:
            route.continue_()

    page.route("**/get_preds**", fail_once)
    page.locator("data-table-module tbody tr", has_text=SIMPLE).first.click()
    error = mod.locator(".status.error")
    expect(error).to_be_visible(timeout=TIMEOUT_MS)
    assert failed
    assert "error_outline" not in error.inner_text()
    assert error.locator("svg.icon-error").count() == 1
    page.evaluate("() => document.fonts.ready.then(() => true)")
    icons = page.evaluate(ICONS_JS)
    assert icons, "no icon found on the page (LIT's toolbar has several)"
    # A ligature rendered by the icon font is one glyph, about 1 em wide; as a word it is several em.
    words = [i for i in icons if i["width"] > 1.6 * i["font"]]
    assert not words, f"icons shown as words: {words}"
    _shot(page, "icons-error-1280x720")
    mod.locator(".status.error button").click()  # Retry: the request goes through this time
    page.locator(f"{SALIENCE}[data-state=ready]").wait_for(state="attached", timeout=TIMEOUT_MS)
    assert not external, f"requests to non-local hosts: {external}"
