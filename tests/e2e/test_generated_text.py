"""LIT's own Generated Text module shows our generation model's output and follows the selection.

LIT 1.3.1's module does not re-render after its predictions arrive (see
frontend/src/lit_fixes.ts); this checks the patched behaviour in the real UI: with
the Generated Text tab open, moving the selection shows the new response.
"""

from __future__ import annotations

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

TAG = plugin_checks.SALIENCE_TAG
LOAD_TIMEOUT_MS = 240_000


def test_generated_text_module_follows_selection(server_url, browser_page):
    from playwright.sync_api import expect

    page, external = browser_page
    plugin_checks.open_lit(page, server_url)
    plugin_checks.select_example(page, "What is the capital of France?")

    page.get_by_text("Generated Text", exact=True).first.click()  # the left panel's tab
    generated = page.locator("generated-text-module")
    expect(generated.get_by_text("Paris").first).to_be_visible(timeout=LOAD_TIMEOUT_MS)

    # Move the selection with the toolbar's "previous datapoint" arrow while the tab stays open.
    page.locator("#ds-select-prev").click()
    module = page.locator(TAG)
    page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    response = module.locator(".response").inner_text().strip()
    assert response and "Paris" not in response
    expect(generated.get_by_text(response.split("\n")[0][:30]).first).to_be_visible(timeout=LOAD_TIMEOUT_MS)
    assert not external, f"requests left the machine: {external}"
