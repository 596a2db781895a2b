"""Stacked views keep the prompt readable at 1280×720, and one method on one prompt has one colour scale (issue 45 §5).

Each test reads the salience module's real layout in Debian Chromium at 1280×720: the prompt box's lines a reader
sees (`visible_lines`: the box's part inside the module and the window, less its padding, in line heights) and the
legends' maxima (their last label). The stacked views of two models (`two_model_server`) are in test_compare_models.py,
with the other tests on that server: a worker that runs the file starts it once.

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

from tests.e2e.plugin_checks import (FEW_SHOT, LOAD_TIMEOUT_MS, MIN_LINES, READY, SALIENCE_TAG, edit_and_compare,
                                     legend_max, open_and_select, select_example, visible_lines)

pytestmark = pytest.mark.e2e

SIMPLE = "What is the capital of France?"


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
