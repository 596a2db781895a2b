"""Issue 35 point 6 in the browser at 1280x720, against the real server on the default model: the small
untruths.

- one token numbering: the span the salience module calls "tokens 3–4 of 8" is called so in Test this
  explanation and in Inside the model (was: "tokens 2–4" in the one, "tokens 3–4" without "of 8" in the other);
- a row with its own target says what runs, "Computing salience…" (was: "Generating the response and computing
  salience…", though nothing is generated), and its response is labelled "Forced target — not the model's own
  answer" in the salience view, Test this explanation, Inside the model and the compare view (was: nowhere);
  a row without a target has no such label;
- the whole help (?) text of each of our modules is readable: nothing cut, inside the window (was: LIT's tooltip
  clamped it to six lines of 232 px, so the methods and colours could not be read).

The cancellations' log level is a server test (tests/integration/test_cancel_logging.py). Screenshots go to
artifacts/e2e/small_truths/.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

SALIENCE = "prompt-salience-module"
EXPLAIN = "explain-test-module"
INSIDE = "inside-model-module"
SIZE = plugin_checks.SMALL_SCREEN
TIMEOUT_MS = 300_000
SIMPLE = "What is the capital of France?"
FORCED = "Classify the sentiment"  # the shipped few-shot row, with the target " Positive"
FORCED_LABEL = "Forced target — not the model\u2019s own answer"
EDITOR = "single-datapoint-editor-module"


def _tab(page, name: str) -> None:
    page.locator(".tab", has_text=name).first.click()


def _shot(page, artifacts_dir, name: str) -> None:
    plugin_checks.screenshot(page, artifacts_dir / "small_truths", name)


def test_every_view_numbers_a_span_as_the_salience_module(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = plugin_checks.open_and_select(page, server_url, SIMPLE)
    mod.locator("select.granularity").select_option("token")  # one target per token: the span is known exactly
    targets = mod.locator(".response .tgt")
    targets.nth(2).click()
    page.keyboard.press("Shift+ArrowRight")  # the 3rd and 4th response tokens
    n = mod.evaluate("e => e.payload.tokens.length - e.payload.n_prompt_tokens")
    desc = f"tokens 3–4 of {n}"
    expect(mod.locator(".target-desc")).to_have_text(desc)

    _tab(page, "Test this explanation")
    expect(page.locator(EXPLAIN).locator(".for")).to_have_text(f"target: {desc} · token", timeout=60_000)
    _shot(page, artifacts_dir, "explain-numbering")
    _tab(page, "Inside the model")
    expect(page.locator(INSIDE).locator(".traced")).to_have_text(
        f"(response token 3 of {n} — the first of the selected {desc}; click one token to trace it)", timeout=60_000)
    _shot(page, artifacts_dir, "inside-numbering")


def test_a_forced_target_is_labelled_and_its_status_says_what_runs(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = plugin_checks.open_and_select(page, server_url, SIMPLE)  # the model's own answer: no label
    expect(mod.locator(".response")).not_to_have_text("")
    expect(mod.locator(".forced-target")).to_have_count(0)

    # Every text of its loading line from now on (a cached answer may come within a frame).
    plugin_checks.record_texts(mod, ".status.loading span", "__ssLoading")
    plugin_checks.select_and_wait(page, FORCED)
    seen = page.evaluate("window.__ssLoading")
    assert seen, "the loading line never showed"
    assert not [t for t in seen if "Generating" in t], f"a forced target said it generates: {seen}"
    assert seen[0] == "Computing salience…", seen
    label = mod.locator(".section-label", has_text="Response").locator(".forced-target")
    expect(label).to_have_text(FORCED_LABEL)
    expect(label).to_be_in_viewport()
    _shot(page, artifacts_dir, "forced-salience")

    _tab(page, "Test this explanation")
    expect(page.locator(EXPLAIN).locator(".forced-target")).to_have_text(FORCED_LABEL, timeout=60_000)
    _tab(page, "Inside the model")
    expect(page.locator(INSIDE).locator(".forced-target")).to_have_text(FORCED_LABEL, timeout=60_000)
    _shot(page, artifacts_dir, "forced-inside")
    _tab(page, "Sequence Salience")

    # Compare: LIT's editor "Add and compare" on the forced row; both sides keep the row's target.
    page.get_by_text("Editor", exact=True).first.click()
    box = page.locator(EDITOR).locator(".entry", has_text="prompt").first.locator("textarea")
    original = box.input_value()
    assert "lasts two full days" in original
    box.fill(original.replace("lasts two full days", "lasts one day"))
    box.dispatch_event("input")
    page.locator(EDITOR).locator("button#compare").click()
    view = mod.locator(".compare")
    view.wait_for(timeout=60_000)
    rows = view.locator(".crow")
    expect(rows).to_have_count(2, timeout=TIMEOUT_MS)
    expect(rows.locator(".forced-target")).to_have_text([FORCED_LABEL, FORCED_LABEL])
    _shot(page, artifacts_dir, "forced-compare")


@pytest.mark.parametrize("tag, last_words", [
    (SALIENCE, "Gradient norm is unsigned, one purple scale: magnitude only."),
    (INSIDE, "switch it off/on, and run."),
    (EXPLAIN, "target span and granularity."),
])
def test_the_whole_help_text_is_readable(server_url, browser_page, artifacts_dir, tag, last_words):
    from playwright.sync_api import expect

    page, _ = browser_page
    plugin_checks.open_lit(page, server_url, SIZE)
    if tag != SALIENCE:
        _tab(page, {INSIDE: "Inside the model", EXPLAIN: "Test this explanation"}[tag])
    group = page.locator("lit-widget-group").filter(has=page.locator(tag)).last
    tooltip = group.locator(".header lit-tooltip").first
    tooltip.locator(".help-icon").hover()
    text = tooltip.locator(".tooltip-text")
    expect(text).to_be_visible()
    expect(text).to_contain_text(last_words)
    page.wait_for_timeout(300)  # a frame for the placement
    box = text.evaluate("e => ({...e.getBoundingClientRect().toJSON(), sh: e.scrollHeight, ch: e.clientHeight})")
    _shot(page, artifacts_dir, f"help-{tag}")
    assert box["sh"] <= box["ch"] + 1, f"the help text is cut: {box['sh']} px of text in {box['ch']} px"
    assert box["left"] >= 0 and box["top"] >= 0 and box["right"] <= SIZE["width"] and \
        box["bottom"] <= SIZE["height"], f"the help text is outside the window: {box}"
    # Its last line is on screen (not hidden by the box's overflow).
    last = text.evaluate("""(e, words) => {
      const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
      let node = null;
      while (walker.nextNode()) if (walker.currentNode.textContent.includes(words.slice(0, 12))) node = walker.currentNode;
      const r = document.createRange(); r.selectNodeContents(node); return r.getBoundingClientRect().toJSON();
    }""", last_words)
    assert last["bottom"] <= min(box["bottom"], SIZE["height"]) + 1, (last, box)
    assert re.search(r"\w", text.inner_text())
