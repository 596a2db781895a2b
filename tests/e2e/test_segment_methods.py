"""Segment methods in the Sequence Salience module, in a real browser against the real server (issue 32):
at sentence granularity, selecting the few-shot classification row shows the gradient first (one pass; the status
line says so before any segment method's map), then leave one sentence out once its forwards finish, with its name on
screen (where the first-map rule names a method at sentence granularity, that method's map comes in between, its
first look as soon as the first highlight: test_first_map.py); the gradient comes back with one key press. The Test tab offers leave one out for the faithfulness curves and draws its curves.
(Not the constitutional row: test_first_map.py measures its leave one sentence out on the same session server,
whose cache would then answer at once, before the gradient is on screen.)"""

from __future__ import annotations

import pytest

from lit_app.schema import method_registry
from sequence_salience.methods import leave_one_out
from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

TAG = "prompt-salience-module"
LOAD_TIMEOUT_MS = 300_000


def _prompt_styles(mod) -> list[str]:
    return mod.locator(".prompt .seg").evaluate_all("els => els.map(e => e.getAttribute('style') || '')")


def test_gradient_first_then_leave_one_sentence_out_and_back(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    page.goto(server_url)
    mod = page.locator(TAG)
    mod.wait_for(timeout=120_000)
    mod.locator("select.granularity").select_option("sentence")
    plugin_checks.record_texts(mod, ".segment-status", "__ssStatus")  # every status line, as it renders
    page.locator("data-table-module tbody tr", has_text="few-shot classification").first.click()
    page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)

    # First highlight: the gradient (the default segment method is being measured meanwhile; a first map the rule
    # names may replace it as soon as its first look comes, so the status line's first words say it was first).
    method = mod.locator("select.method")
    mod.locator('.prompt .seg[style*="background"]').first.wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)

    # Then leave one sentence out, named on screen, once its forwards finish.
    status = mod.locator('.segment-status[data-method="leave_one_out"]')
    status.wait_for(timeout=LOAD_TIMEOUT_MS)
    expect(status.locator(".method-on-screen")).to_have_text("Leave one segment out")
    expect(status).to_contain_text("measured per sentence: changing granularity re-measures")
    expect(method).to_have_value("leave_one_out")
    # Worded from what ran: the record's cost unit (one forward per segment), or, after a first map that measured
    # sentences exactly (attention_verified at sentence), those reused and the forwards for the others only.
    reused = method_registry.FIRST_MAP_METHOD.get("sentence") is not None
    expect(mod.locator(".precision")).to_contain_text(
        "the first map's exact" if reused else f"measured per sentence: {leave_one_out.METHOD.cost_unit};")
    assert mod.locator('.prompt .seg[style*="background"]').count() > 0
    first_status = page.evaluate("window.__ssStatus")[0]
    assert first_status.startswith("Gradient shown." if reused else "First map: Gradient norm"), first_status
    loo_styles = _prompt_styles(mod)
    page.mouse.move(5, 5)
    page.screenshot(path=str(artifacts_dir / "segment-leave-one-out.png"))

    # The gradient back, from the keyboard.
    status.locator("button.show-gradient").focus()
    page.keyboard.press("Enter")
    expect(method).to_have_value("grad_norm")
    expect(mod.locator(".segment-status")).to_have_count(0)
    assert _prompt_styles(mod) != loo_styles, "the leave-one-out map looks like the gradient's"
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()

    # The Test tab: leave one out's curves beside the gradient's (3 deletion steps, sentences).
    page.locator(".tab", has_text="Test this explanation").first.click()
    explain = page.locator("explain-test-module")
    explain.locator("input.steps").fill("3")
    explain.locator("input.steps").dispatch_event("change")
    explain.locator("label.method", has_text="Gradient × input").locator("input").uncheck()
    explain.locator("label.method", has_text="Leave one segment out").locator("input").check()
    explain.locator("button.run.curves").click()
    loo = explain.locator('svg.chart.deletion path.line.method[data-method="leave_one_out"]')
    loo.wait_for(timeout=LOAD_TIMEOUT_MS)
    expect(explain.locator('table.aopc.deletion tr[data-method="leave_one_out"]')).to_have_count(1)
    expect(explain.locator('table.aopc.deletion tr[data-method="leave_one_out"]')).to_contain_text("Leave one segment out")
    assert not external, f"requests to non-local hosts: {external}"
