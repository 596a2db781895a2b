"""The Sequence Salience module in LIT's UI, in a real browser against the real server.

Flow: select an example, see highlights, click an output word and see the
salience change, drag and use the keyboard, switch to sentence granularity,
edit the prompt in the datapoint editor, add it, see the new output and its
salience. Screenshots go to artifacts/e2e/ (docs/screenshot.png is test_layout.py's, at
1280x720); timings measured in the page go to
artifacts/e2e/timings.json and are printed (never asserted: no wall-clock
assertions in tests).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

TAG = plugin_checks.SALIENCE_TAG
EXAMPLE_PROMPT = plugin_checks.EXAMPLE_PROMPT
EDITED_PROMPT = "What is the capital of Italy? Answer in one word."
LOAD_TIMEOUT_MS = 240_000
IG_STEPS = plugin_checks.IG_STEPS_OF_ITS_OWN["salience_module"]  # a count no other test runs on the example row


def _reset_action(mod) -> None:
    mod.evaluate("e => { delete e.dataset.lastAction; delete e.dataset.lastActionMs; }")


def _wait_action(page, name: str) -> float:
    """Waits until the module painted the result of `name`; returns its in-page time (ms)."""
    page.locator(f'{TAG}[data-last-action="{name}"]').wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    return float(page.locator(TAG).get_attribute("data-last-action-ms"))


def _prompt_styles(mod) -> list[str]:
    return mod.locator(".prompt .seg").evaluate_all("els => els.map(e => e.getAttribute('style') || '')")


def _highlighted(mod) -> int:
    return mod.locator('.prompt .seg[style*="background"]').count()


def test_select_retarget_granularity_edit(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    timings: dict[str, float] = {}
    shots = []

    def shot(name: str) -> None:
        page.mouse.move(5, 5)  # no hover tooltip in the picture
        path = artifacts_dir / f"{name}.png"
        page.screenshot(path=str(path))
        shots.append(path)

    mod = plugin_checks.open_lit(page, server_url)
    expect(mod).to_contain_text("Select a prompt")

    # 1. Select an example in the data table -> highlighted salience.
    _reset_action(mod)
    row = page.locator("data-table-module tbody tr", has_text=EXAMPLE_PROMPT).first
    t0 = time.perf_counter()
    row.click()
    page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    timings["select_to_salience_ms_in_page"] = _wait_action(page, "select")
    timings["select_to_salience_ms_wall"] = (time.perf_counter() - t0) * 1000
    assert _highlighted(mod) > 0, "no highlighted prompt segments after selecting an example"
    response = mod.locator(".response").inner_text().strip()
    assert response, "empty response"
    assert "whole response" in mod.locator(".target-desc").inner_text()
    assert mod.locator(".top li").count() > 0
    shot("1-selected")

    # Hover: the tooltip shows the exact value.
    mod.locator('.prompt > .seg[style*="background"]').first.hover()  # not in the folded system prompt
    tip = mod.locator(".tooltip")
    tip.wait_for(state="visible")
    assert "salience" in tip.inner_text()

    # 2. Click one output word -> the target changes, and so does the salience.
    before = _prompt_styles(mod)
    targets = mod.locator(".response .tgt")
    assert targets.count() >= 2, f"response {response!r} has fewer than two target segments"
    _reset_action(mod)
    paris = targets.filter(has_text="Paris")
    (paris.first if paris.count() else targets.nth(targets.count() // 2)).click()
    timings["retarget_click_ms_in_page"] = _wait_action(page, "retarget")
    assert "whole response" not in mod.locator(".target-desc").inner_text()
    assert mod.locator(".response .tgt.sel").count() >= 1
    after = _prompt_styles(mod)
    assert after != before, "prompt colours did not change after retargeting"
    shot("2-retargeted")

    # Drag over the response (all but its last segment): a multi-segment target.
    n_targets = targets.count()
    first, last = targets.first.bounding_box(), targets.nth(n_targets - 2).bounding_box()
    _reset_action(mod)
    page.mouse.move(first["x"] + 2, first["y"] + first["height"] / 2)
    page.mouse.down()
    page.mouse.move(last["x"] + last["width"] - 2, last["y"] + last["height"] / 2, steps=5)
    page.mouse.up()
    timings["retarget_drag_ms_in_page"] = _wait_action(page, "retarget")
    assert mod.locator(".response .tgt.sel").count() == n_targets - 1
    assert "tokens" in mod.locator(".target-desc").inner_text()

    # Keyboard: Escape resets to the whole response, arrows move a one-segment target.
    targets.first.focus()
    page.keyboard.press("Escape")
    expect(mod.locator(".target-desc")).to_contain_text("whole response")
    _reset_action(mod)
    page.keyboard.press("ArrowRight")
    timings["retarget_key_ms_in_page"] = _wait_action(page, "retarget")
    assert mod.locator(".response .tgt.sel").count() == 1

    # 3. Sentence granularity: fewer, longer segments; no server call needed.
    words = mod.locator(".prompt .seg").count()
    _reset_action(mod)
    mod.locator("select.granularity").select_option("sentence")
    timings["granularity_ms_in_page"] = _wait_action(page, "granularity")
    assert mod.locator(".prompt .seg").count() < words
    assert "Top sentences" in mod.locator(".side").inner_text()
    assert _highlighted(mod) > 0
    shot("3-sentences")

    # Integrated gradients (IG_STEPS = 4 steps, to keep the test short on CPU): a second
    # request with ig_steps; the legend names the step count. The step count shows only
    # with its method (the request at the default count is replaced by the IG_STEPS one).
    assert mod.locator("input.ig-steps").count() == 0
    _reset_action(mod)
    mod.locator("select.method").select_option("integrated_gradients")
    mod.locator("input.ig-steps").fill(str(IG_STEPS))
    mod.locator("input.ig-steps").dispatch_event("change")
    _reset_action(mod)  # the 16-step request may have painted meanwhile: wait for the IG_STEPS one
    timings["integrated_gradients_4_steps_ms_in_page"] = _wait_action(page, "method")
    expect(mod.locator(".legend-title")).to_contain_text(f"{IG_STEPS} steps")
    assert "completeness error" in mod.locator(".side").inner_text()
    # 4 steps fail IG's completeness check on this model (issue 45 §6): nothing coloured until "Show anyway".
    rejected = mod.locator(".completeness-rejected")
    expect(rejected).to_have_attribute("data-shown", "no")
    assert _highlighted(mod) == 0
    rejected.locator("button.show-anyway").click()
    expect(rejected).to_have_attribute("data-shown", "yes")
    assert _highlighted(mod) > 0

    # SmoothGrad (2 samples): the span on screen from the server, a signed map; the
    # per-token matrix only when ticked, then retargeting (mouse, keyboard) paints at once.
    _reset_action(mod)
    mod.locator("select.granularity").select_option("word")
    _wait_action(page, "granularity")
    _reset_action(mod)
    mod.locator("select.method").select_option("smooth_grad")
    expect(mod.locator("input.ig-steps")).to_have_count(0)
    mod.locator("input.sg-samples").fill("2")
    mod.locator("input.sg-samples").dispatch_event("change")
    _reset_action(mod)
    timings["smooth_grad_2_samples_ms_in_page"] = _wait_action(page, "method")
    expect(mod.locator(".legend-title")).to_contain_text("Signed (diverging)")
    expect(mod.locator(".legend-title")).to_contain_text("2 samples")
    expect(mod.locator(".precision")).to_contain_text("per-token SmoothGrad off")
    assert _highlighted(mod) > 0
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()
    mod.locator("input.sg-per-token").check()
    mod.locator('.precision[data-exact="matrix"]').wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    expect(mod.locator(".precision")).to_have_attribute("data-detail", "done")
    if mod.locator("button.reset").count():
        mod.locator("button.reset").click()
    expect(mod.locator(".target-desc")).to_contain_text("whole response")
    before = _prompt_styles(mod)
    _reset_action(mod)
    targets.first.click()
    timings["smooth_grad_retarget_click_ms_in_page"] = _wait_action(page, "retarget")
    assert "whole response" not in mod.locator(".target-desc").inner_text()
    assert _highlighted(mod) > 0 and _prompt_styles(mod) != before
    _reset_action(mod)
    page.keyboard.press("ArrowRight")
    timings["smooth_grad_retarget_key_ms_in_page"] = _wait_action(page, "retarget")
    assert mod.locator(".response .tgt.sel").count() == 1 and _highlighted(mod) > 0
    _reset_action(mod)
    page.keyboard.press("Escape")
    _wait_action(page, "retarget")
    expect(mod.locator(".target-desc")).to_contain_text("whole response")
    assert _highlighted(mod) > 0
    shot("3b-smooth-grad")
    mod.locator("select.method").select_option("grad_norm")

    # 4. Edit the prompt in the datapoint editor, add it -> new output and salience.
    page.get_by_text("Editor", exact=True).first.click()
    editor = page.locator("single-datapoint-editor-module")
    editor.locator(".entry", has_text="prompt").first.locator("textarea").fill(EDITED_PROMPT)
    _reset_action(mod)
    editor.locator("button#make").click()
    timings["added_datapoint_to_salience_ms_in_page"] = _wait_action(page, "select")
    page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached")
    assert "Italy" in mod.locator(".prompt").inner_text()
    new_response = mod.locator(".response").inner_text().strip()
    assert new_response and new_response != response, (response, new_response)
    assert _highlighted(mod) > 0
    shot("4-edited")

    # No error banners, and nothing left this machine.
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()
    assert not external, f"requests to non-local hosts: {external}"

    (artifacts_dir / "timings.json").write_text(json.dumps(timings, indent=2))
    print("\nSequence Salience e2e timings (ms):", json.dumps(timings, indent=2))
    print("screenshots:", ", ".join(str(s) for s in shots))
