"""Stacked views keep the prompt readable at 1280×720, and one method on one prompt has one colour scale (issue 45 §5).

Each test reads the salience module's real layout in Debian Chromium at 1280×720: the prompt box's lines a reader
sees (`visible_lines`: the box's part inside the module and the window, less its padding, in line heights) and the
legends' maxima (their last label).

`test_two_models_keep_each_prompt_readable`: two models selected (LIT stacks one salience module per model, 243 px
each); each module's prompt shows at least MIN_LINES lines without scrolling (was two for model a).

`test_compare_models_keeps_the_map_and_bs_own_scale`: Compare models open in model a's module: a's map shows at
least MIN_LINES lines of its prompt without scrolling the module (the section opens beside the map and scrolls on its
own; was: above it, the module scrolled to reach the map); b's own module keeps b's scale (its legend ends at its
largest prompt value, its top list's first, not at the shared scale) and its legend says so and where both share one
(was: nothing said); then with the intensity at 2 the section's shared legend ends where a's map's legend does, which
says the scale is the comparison's beside it. (Two tests that opened the same view until session 38.)

`test_add_and_compare_keeps_the_map_readable_and_a_replaced_run_in_its_colours`: the few-shot row edited in LIT's
editor (one review sentence replaced) and *Add and compare*: the comparison takes the top, the map below it still
shows at least MIN_LINES lines of the prompt without scrolling (was two), and the comparison's aligned prompt at least
three, scrolled to the edit; in "both values" each word of the replaced run has its own colour, the colour the map
below gives that word (was: the run one block coloured by its sum); in "difference" the run is one colour and the
difference's legend says why. (Two tests with the same edit until session 38.)

`test_one_scale_for_one_method_on_one_prompt`: the few-shot row pinned (LIT's toolbar), the simple question
selected: the comparison's shared scale and the map's below it end at the same value, and the map's legend says
it is shared (was: the comparison's summed a replaced run, far above the map's largest word).
"""

from __future__ import annotations

import pytest

from tests.e2e.plugin_checks import (LOAD_TIMEOUT_MS, READY, SALIENCE_TAG, doc_picture, edit_and_compare,
                                     open_and_select, open_both_models, open_compare_models, select_example)

pytestmark = pytest.mark.e2e

MIN_LINES = 5  # a prompt box of fewer lines is not readable (issue 45 §5: two lines, or none)
FEW_SHOT = "Classify the sentiment"  # lit_app/data/case_studies.jsonl: the longest prompt of the shipped rows
SIMPLE = "What is the capital of France?"
# The lines of an element's text box that are on screen: its rectangle cut to the module's and the window's, less its
# padding and borders, in line heights (the box scrolls its own text: its height is what it shows).
VISIBLE_LINES_JS = """(m, sel) => { const r = m.shadowRoot, box = r.querySelector(sel);
  if (box === null) return 0;
  const b = box.getBoundingClientRect(), mod = r.querySelector('.module').getBoundingClientRect();
  const s = getComputedStyle(box), px = (k) => parseFloat(s[k]);
  const shown = Math.min(b.bottom, mod.bottom, innerHeight) - Math.max(b.top, mod.top, 0);
  const pad = px('paddingTop') + px('paddingBottom') + px('borderTopWidth') + px('borderBottomWidth');
  return Math.max(0, Math.floor((shown - pad) / px('lineHeight') + 0.01)); }"""


def visible_lines(mod, selector: str = ".body .text.prompt") -> int:
    return mod.evaluate(VISIBLE_LINES_JS, selector)


def legend_max(legend) -> float:
    """The value a legend (its .legend-labels) ends at."""
    return float(legend.locator(".legend-labels span").last.inner_text())


def test_two_models_keep_each_prompt_readable(two_model_server, browser_page, artifacts_dir):
    page, external = browser_page
    sal_a, sal_b = open_both_models(page, two_model_server.url, FEW_SHOT)
    page.mouse.move(5, 5)
    for m, mod in (("a", sal_a), ("b", sal_b)):
        assert mod.evaluate("m => m.shadowRoot.querySelector('.module').scrollTop") == 0
        lines = visible_lines(mod)
        assert lines >= MIN_LINES, f"model {m}'s prompt shows {lines} lines at 1280x720"
    page.screenshot(path=str(artifacts_dir / "stacked-two-models.png"))
    assert not external, external


def test_compare_models_keeps_the_map_and_bs_own_scale(two_model_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    sal_a, sal_b = open_both_models(page, two_model_server.url, FEW_SHOT)
    section = open_compare_models(page, sal_a)
    prompt = sal_a.locator(".body .text.prompt")
    # The map keeps its prompt box; the section above scrolls on its own, its head (the toggle) on screen.
    lines = prompt.evaluate("e => Math.floor((e.clientHeight - 12) / parseFloat(getComputedStyle(e).lineHeight))")
    assert lines >= MIN_LINES, f"a's prompt box holds {lines} lines under Compare models"
    assert section.evaluate("e => e.scrollHeight > e.clientHeight")
    expect(section.locator("button.toggle")).to_be_in_viewport()
    # Without scrolling a's module, its map shows the prompt, the section beside it (to its right, side by side).
    page.mouse.move(5, 5)
    assert sal_a.evaluate("m => m.shadowRoot.querySelector('.module').scrollTop") == 0
    lines = visible_lines(sal_a)
    assert lines >= MIN_LINES, f"a's prompt shows {lines} lines under Compare models without scrolling"
    box, side = prompt.bounding_box(), section.bounding_box()
    assert side["x"] >= box["x"] + box["width"] and side["y"] < box["y"] + box["height"], (box, side)
    page.screenshot(path=str(artifacts_dir / "stacked-compare-models.png"))
    doc_picture(artifacts_dir / "stacked-compare-models.png", "stacked.png")

    # b's own module keeps b's scale while a's module shows a and b on one scale.
    assert sal_a.locator("select.method").input_value() == \
        sal_b.locator("select.method").input_value()  # one method on one prompt in both modules
    shared = legend_max(section.locator(".legend-shared"))
    own = legend_max(sal_b.locator(".side .legend"))
    # b's scale is b's: its legend ends at its largest prompt value (its top list's first, in the legend's digits).
    top = float(sal_b.locator(".side .top-item").first.get_attribute("data-value"))
    assert own == pytest.approx(abs(top), rel=1e-3), (own, top)
    assert own != shared, (own, shared)  # the tiny random b and the default model differ (0.29 vs 3.6 at writing)
    expect(sal_b.locator(".side .legend-title")).to_contain_text(
        "scale of b alone; Compare models (in a's module) puts a and b on one scale")
    sal_b.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir / "stacked-own-scale.png"))

    # One scale: at intensity 2, the section's shared legend ends where a's map's legend does (the section showed
    # its values at intensity 1 whatever the module's).
    sal_a.locator("input.intensity").fill("2")
    expect(sal_a.locator(".side .legend-title")).to_contain_text("one scale with the comparison beside")
    shared, own = legend_max(section.locator(".legend-shared")), legend_max(sal_a.locator(".side .legend"))
    assert shared == own, (shared, own)
    assert not external, external


def replace_a_sentence(page, url: str):
    """The few-shot row at 1280×720, one review sentence replaced in LIT's editor and *Add and compare* pressed;
    returns the salience module once the comparison shows its values."""
    from playwright.sync_api import expect

    mod = open_and_select(page, url, FEW_SHOT)
    edit_and_compare(page, "The hinge cracked on the second day.", "The screen went dark after one hour.")
    mod.locator(".compare").wait_for(timeout=60_000)
    page.locator(f"{SALIENCE_TAG}{READY}").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    expect(mod.locator(".compare .cprompt:not(.pending)")).to_be_visible(timeout=LOAD_TIMEOUT_MS)
    return mod


RGB_JS = "e => getComputedStyle(e).backgroundColor.match(/[0-9.]+/g).slice(0, 3).map(Number)"


def test_add_and_compare_keeps_the_map_readable_and_a_replaced_run_in_its_colours(server_url, browser_page,
                                                                                  artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    mod = replace_a_sentence(page, server_url)
    page.mouse.move(5, 5)
    assert mod.evaluate("m => m.shadowRoot.querySelector('.module').scrollTop") == 0
    lines = visible_lines(mod)
    assert lines >= MIN_LINES, f"the map's prompt shows {lines} lines under Add and compare"
    compared = visible_lines(mod, ".compare .cprompt")
    assert compared >= 3, f"the comparison's aligned prompt shows {compared} lines"
    # In those lines: the edit (the aligned prompt scrolled to it), its new words underlined.
    expect(mod.locator(".compare .cprompt ins").first).to_be_in_viewport()
    page.screenshot(path=str(artifacts_dir / "stacked-add-and-compare.png"))

    # The replaced run in "both values": each word in its own colour, the colour the map below gives that word.
    assert mod.locator(".compare button.mode-both").get_attribute("aria-pressed") == "true"
    run = mod.locator(".compare .cprompt ins.cseg", has_text="went dark")
    pieces = run.locator(".cpiece")
    words = [w for w in pieces.all_inner_texts()]
    assert [w.strip() for w in words] == ["screen", "went", "dark", "after", "one", "hour"], words
    colours = {}
    for piece in pieces.all():
        s = piece.get_attribute("data-s")
        got = piece.evaluate(RGB_JS)
        # The map below shows the selected prompt with the same method on the same scale: each word's colour there.
        want = mod.locator(f'.body .text.prompt .seg[data-s="{s}"]').evaluate(RGB_JS)
        assert all(abs(g - w) <= 2 for g, w in zip(got, want)), (piece.inner_text(), got, want)
        colours[s] = tuple(got)
    assert len(set(colours.values())) >= 3, colours  # word by word, not one block
    page.screenshot(path=str(artifacts_dir / "compare-run-pieces.png"))
    # The difference: the run is one colour (its words do not pair up), and its legend says why.
    mod.locator(".compare button.mode-difference").click()
    expect(run.locator(".cpiece")).to_have_count(0)
    expect(mod.locator(".compare .legend-diff .legend-note")).to_contain_text("one colour: its segments do not pair up")
    assert not external, external


def test_one_scale_for_one_method_on_one_prompt(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    mod = open_and_select(page, server_url, FEW_SHOT)
    page.locator("button", has_text="Pin datapoint").first.click()
    select_example(page, SIMPLE)
    view = mod.locator(".compare")
    view.wait_for(timeout=60_000)
    page.locator(f"{SALIENCE_TAG}{READY}").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    expect(view.locator(".cprompt:not(.pending)")).to_be_visible(timeout=LOAD_TIMEOUT_MS)
    assert mod.locator("select.method").input_value() == "grad_norm"  # the same method on both
    # The map shows the selected prompt with the method the comparison shows: one scale, said in its legend.
    expect(view.locator(".legend-shared")).to_be_visible()
    shared, own = legend_max(view.locator(".legend-shared")), legend_max(mod.locator(".side .legend"))
    assert shared == own, (shared, own)
    expect(mod.locator(".side .legend-title")).to_contain_text("one scale with the comparison above")
    page.screenshot(path=str(artifacts_dir / "stacked-one-scale.png"))
    assert not external, external
