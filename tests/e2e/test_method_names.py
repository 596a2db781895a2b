"""Issue 45 §2, "linked from every method's name", in Chromium at 1280x720 against the real server: the method's name
wherever the page shows it opens the one help (shared/method_help.ts) at that method's two lines (its label, cost and
`trust` from the published record): the top list ("Top words by Gradient norm"), the status line of a segment method
on screen, Test this explanation (the methods tested, the AOPC table's rows, the reduction's "ordered by") and the
comparison of an edit. Clicking a tested method's name opens its help and leaves its checkbox as it was.
(Compare models: test_compare_models.py, which has the two-model server. Before: the names were plain text; only an
ⓘ beside the Method select opened the help.)"""

from __future__ import annotations

import pytest

from tests.e2e import plugin_checks
from tests.e2e.plugin_checks import EXPLAIN_TAG, help_opens_at, open_tab

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 300_000


def test_every_method_name_opens_its_help(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    mod = plugin_checks.open_and_select(page, server_url)

    # The top list names the method whose values it ranks.
    top = mod.locator('.top-label .method-name[data-where="top-list"]')
    expect(top).to_have_attribute("data-method", mod.locator("select.method").input_value())
    help_opens_at(page, top, "grad_norm")

    # Test this explanation: a tested method's name (its checkbox unchanged), the AOPC table's row, "ordered by".
    open_tab(page, "Test this explanation")
    explain = page.locator(EXPLAIN_TAG)
    expect(explain.locator(".for")).to_contain_text("target:", timeout=60_000)
    box = explain.locator("label.method", has=page.locator('.method-name[data-method="grad_x_input"]'))
    checked = box.locator("input").is_checked()
    help_opens_at(page, box.locator(".method-name"), "grad_x_input")
    assert box.locator("input").is_checked() == checked, "clicking the method's name toggled its checkbox"
    explain.locator("input.steps").fill("3")
    explain.locator("input.steps").dispatch_event("change")
    explain.locator("button.run.curves").click()
    row = explain.locator('table.aopc.deletion tr[data-method="grad_x_input"]')
    row.wait_for(timeout=TIMEOUT_MS)
    help_opens_at(page, row.locator(".method-name"), "grad_x_input")
    explain.locator("button.tab-btn.reduce").click()
    ordered = explain.locator('.setting .method-name[data-where="test"]')
    help_opens_at(page, ordered, ordered.get_attribute("data-method"))
    open_tab(page, "Sequence Salience")

    # The status line of a segment method on screen.
    mod.locator("select.granularity").select_option("sentence")
    mod.locator("select.method").select_option("leave_one_out")
    status = mod.locator('.segment-status[data-method="leave_one_out"] .method-on-screen .method-name')
    status.wait_for(timeout=TIMEOUT_MS)
    help_opens_at(page, status, "leave_one_out", artifacts_dir / "method-name-help.png")

    # A help left open while the method on screen changes ("Show gradient" here; the automatic steps too) marks the
    # new method's entry (it marked the one it was opened at).
    controls = mod.locator('.method-help[data-where="controls"]')
    controls.locator("summary").click()
    marked = controls.locator(".method-help-panel li.current")
    expect(marked).to_have_attribute("data-method", "leave_one_out")
    mod.locator("button.show-gradient").dispatch_event("click")
    expect(controls).to_have_attribute("data-method", "grad_norm")
    expect(marked).to_have_attribute("data-method", "grad_norm")
    controls.locator("button.help-close").click()
    mod.locator("select.method").select_option("leave_one_out")
    status.wait_for(timeout=TIMEOUT_MS)

    # The comparison of an edit names the method its colours show. The edit is a new selection: the gradient, then the
    # first map, then the exact map replace each other on screen (the automatic steps); once the exact map is there
    # (its status no longer pending) and the comparison's colours are drawn, the Method select, the status line and
    # the comparison all name that method (the select showed the gradient's name while the exact map was on screen).
    plugin_checks.edit_and_compare(page, "France", "Spain")
    settled = mod.locator('.segment-status[data-auto="true"]:not(.pending)')
    settled.wait_for(timeout=TIMEOUT_MS)
    mod.locator(".compare .cprompt:not(.pending)").wait_for(timeout=TIMEOUT_MS)
    shown = settled.get_attribute("data-method")
    expect(mod.locator("select.method")).to_have_value(shown)
    compare = mod.locator('.compare .section-label .method-name[data-where="compare"]')
    help_opens_at(page, compare, shown)
    expect(mod.locator("select.method")).to_have_value(shown)  # nothing replaced it meanwhile
    assert not external, f"requests to non-local hosts: {external}"
