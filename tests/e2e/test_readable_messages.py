"""Issue 45 point 4 in the browser at 1280x720, against the real server on the default model: messages readable
where they appear and true to what the page does.

- the datapoint editor's refusal of an over-long prompt sits on a line of its own inside the editor, above its
  buttons (was: squeezed into LIT's 36 px footer row and drawn from x = -65 px: the user read "m +" and "up to");
- a row added from the editor after editing its prompt does not carry the selected row's *case* ("simple
  question" on another prompt); the editor's case box shows the emptied value before "Add";
- LIT's toolbar keeps the page title "Sequence Salience" on one line at 1280 px (was: two lines).

Screenshots go to artifacts/e2e/readable_messages/.
"""

from __future__ import annotations

import contextlib
import re

import pytest

from sequence_salience.methods import leave_one_out
from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

EDITOR = "single-datapoint-editor-module"
SIMPLE = plugin_checks.EXAMPLE_PROMPT


def _open_editor_on(page, url: str, prompt: str):
    plugin_checks.open_lit(page, url, plugin_checks.SMALL_SCREEN)
    page.locator("data-table-module tbody tr", has_text=prompt).first.click()
    page.get_by_text("Editor", exact=True).first.click()
    editor = page.locator(EDITOR)
    editor.locator(".entry").first.wait_for()
    return editor


def _shot(page, artifacts_dir, name: str) -> None:
    plugin_checks.screenshot(page, artifacts_dir / "readable_messages", name)


def test_over_long_prompt_refusal_is_drawn_inside_the_editor(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    editor = _open_editor_on(page, server_url, SIMPLE)
    box = editor.locator(".entry", has_text="prompt").first.locator("textarea")
    box.fill("x" * 40_000)
    box.dispatch_event("input")
    refusal = editor.locator(".ss-add-refusal")
    expect(refusal).to_contain_text("40,000 characters; this server accepts up to 32,000 (--max_prompt_chars)")
    _shot(page, artifacts_dir, "over_long_refusal")
    inside, line = editor.bounding_box(), refusal.bounding_box()
    assert inside is not None and line is not None
    assert line["x"] >= inside["x"] and line["x"] + line["width"] <= inside["x"] + inside["width"] + 1, (line, inside)
    assert line["y"] + line["height"] <= inside["y"] + inside["height"] + 1, (line, inside)
    # Readable: at most three lines of 12 px text across (most of) the editor's width, above the "Add" button.
    assert line["width"] >= 0.8 * inside["width"] and line["height"] <= 3 * 18, line
    add = editor.locator("button#make").bounding_box()
    assert add is not None and line["y"] + line["height"] <= add["y"], (line, add)


def test_a_row_added_from_the_editor_does_not_copy_the_case(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    editor = _open_editor_on(page, server_url, SIMPLE)
    case = editor.locator(".entry", has_text="case").first.locator("input")
    expect(case).to_have_value("simple question")
    new_prompt = "What is the capital of Italy?"
    box = editor.locator(".entry", has_text="prompt").first.locator("textarea")
    box.fill(new_prompt)
    box.dispatch_event("input")
    expect(case).to_have_value("")  # the editor shows the case the new row will have
    editor.locator("button#make").click()
    page.get_by_text("Prompts", exact=True).first.click()
    row = page.locator("data-table-module tbody tr", has_text=new_prompt).first
    row.wait_for()
    _shot(page, artifacts_dir, "added_row")
    assert "simple question" not in row.inner_text(), row.inner_text()


def test_page_title_is_one_line_at_1280(server_url, browser_page, artifacts_dir):
    page, _ = browser_page
    plugin_checks.open_lit(page, server_url, plugin_checks.SMALL_SCREEN)
    title = page.locator("lit-app-toolbar #title-group")
    title.wait_for()
    page.wait_for_timeout(300)  # the patch's style lands after the toolbar's first update
    _shot(page, artifacts_dir, "toolbar")
    lines = title.evaluate("e => { const t = [...e.childNodes].find((n) => n.nodeType === 3 && n.textContent.trim());"
                           " const r = document.createRange(); r.selectNodeContents(t);"
                           " return [t.textContent.trim(), r.getClientRects().length]; }")
    assert lines == ["Sequence Salience", 1], lines
    # No toolbar button pushed out of the window to make room ("Configure", "Copy Link").
    rights = page.locator("lit-app-toolbar #headline button").evaluate_all(
        "bs => bs.filter((b) => b.offsetParent !== null).map((b) => [b.innerText.trim(), b.getBoundingClientRect().right])")
    assert rights and all(right <= 1280 for _, right in rights), rights


def test_progress_cost_and_result_count_the_same_forwards(server_url, browser_page, artifacts_dir):
    """Leave one word out on the few-shot row: the button's cost, every progress line's total and the result's
    count are one number (was: the progress counted the edited prompts only, "8 forwards", the result 9)."""
    import re

    from playwright.sync_api import expect

    page, _ = browser_page
    mod = plugin_checks.open_lit(page, server_url, plugin_checks.SMALL_SCREEN)
    mod.locator("select.granularity").select_option("word")
    plugin_checks.select_and_wait(page, "Classify the sentiment")
    mod.locator("select.method").select_option(leave_one_out.NAME)
    button = mod.locator(".segment-status button.measure-all")
    expect(button).to_contain_text(re.compile(r"~\d+ forwards"))
    cost = int(re.search(r"~(\d+) forwards", button.inner_text()).group(1))
    plugin_checks.record_texts(mod, ".segment-status", "__segmentStatus")
    button.click()
    precision = mod.locator(".precision")
    expect(precision).to_contain_text("prompts scored", timeout=plugin_checks.LOAD_TIMEOUT_MS)
    scored = int(re.search(r"(\d+) prompts scored", precision.inner_text()).group(1))
    seen = page.evaluate("window.__segmentStatus")
    totals = [int(m.group(2)) for t in seen for m in re.finditer(r"(\d+) / (\d+) forwards", t)]
    _shot(page, artifacts_dir, "leave_one_word_out")
    assert totals, f"no progress line was shown while {cost} forwards ran: {seen}"
    assert set(totals) == {cost} and scored == cost, (cost, totals, scored)


def test_escape_resets_the_target_after_tab_left_the_response(server_url, browser_page, artifacts_dir):
    """A target chosen on the response, Tab pressed until the focus is outside the salience module: Escape still
    gives back the whole response (was: nothing happened)."""
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = plugin_checks.open_and_select(page, server_url)
    targets = mod.locator(".response .tgt")
    targets.first.click()
    expect(mod.locator(".target-desc")).not_to_contain_text("whole response")
    for _ in range(40):  # the module's last focusable control, then out of it
        page.keyboard.press("Tab")
        if not mod.evaluate("e => e.matches(':focus-within')"):
            break
    assert not mod.evaluate("e => e.matches(':focus-within')"), "Tab never left the module"
    page.keyboard.press("Escape")
    expect(mod.locator(".target-desc")).to_contain_text("whole response")


def test_the_chain_of_thought_answer_is_in_view(server_url, browser_page, artifacts_dir):
    """The chain-of-thought row at 1280x720: the response's last segment (where its answer is) lies inside the
    response box's visible area, with the prompt's first and last segments inside the prompt box (was: the
    response capped at 30 % of the pane, its answer below the fold, under a half-empty prompt box)."""
    page, _ = browser_page
    mod = plugin_checks.open_and_select(page, server_url, "A train leaves")
    _shot(page, artifacts_dir, "chain_of_thought")
    for box, first, last in ((".response", ".response .tgt", ".response .tgt"), (".prompt", ".prompt .seg", ".prompt .seg")):
        area = mod.locator(box).bounding_box()
        for seg in (mod.locator(first).first.bounding_box(), mod.locator(last).last.bounding_box()):
            assert area and seg and area["y"] - 1 <= seg["y"] and seg["y"] + seg["height"] <= area["y"] + area["height"] + 1, (
                box, seg, area)


# Records, at every change of the module's shadow DOM, whether it says it is computing, whether it shows the prompt,
# and the fixed target's text on screen ('' when none).
_WAIT_RECORDER_JS = """(e) => {
  const seen = window.__waits = [];
  new MutationObserver(() => {
    const root = e.shadowRoot;
    const loading = root.querySelector('.status.loading') !== null;
    const prompt = root.querySelector('.text.prompt')?.textContent.trim() ?? '';
    const target = root.querySelector('.response.fixed-target')?.textContent.trim() ?? '';
    seen.push([loading, prompt.length > 0, target]);
  }).observe(e.shadowRoot, {subtree: true, childList: true, characterData: true});
}"""


def test_a_fixed_target_row_shows_its_prompt_while_it_computes(server_url, browser_page, artifacts_dir):
    """The constitutional row has a fixed target (nothing is generated): from the click on, whenever the module says
    it is computing, the prompt is on screen, and the fixed target with it (was: "Computing salience…" alone, for
    14.5 s on a CPU)."""
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = plugin_checks.open_lit(page, server_url, plugin_checks.SMALL_SCREEN)
    mod.evaluate(_WAIT_RECORDER_JS)
    plugin_checks.select_example(page, "Menu: onion soup")
    waiting = mod.locator(".response.fixed-target")
    if mod.locator(".status.loading").count():  # (a moment only when the session's server had this row cached)
        with contextlib.suppress(AssertionError):  # the screenshot, while the wait lasts; the recorder asserts below
            expect(waiting).to_contain_text("I recommend the mushroom risotto", timeout=2_000)
            _shot(page, artifacts_dir, "fixed_target_wait")
    page.locator(f"{plugin_checks.SALIENCE_TAG}{plugin_checks.READY}").wait_for(
        state="attached", timeout=plugin_checks.LOAD_TIMEOUT_MS)
    waits = page.evaluate("window.__waits")
    # Every moment the module said it was computing, it showed the prompt and the fixed target. A check of the page
    # after the click raced the answer: with the row cached by an earlier test of the worker (test_first_map's
    # constitutional row), the wait ended between the check and the look, and the fresh clone failed.
    assert waits and not [w for w in waits if w[0] and not (w[1] and "I recommend the mushroom risotto" in w[2])], \
        waits[:20]
