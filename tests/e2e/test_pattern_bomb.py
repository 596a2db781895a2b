"""Issue 43 §3 in the browser at 1280x720, against the session's server: the pattern bomb `a{99999999}` typed
into the salience module's regex box is refused by the page, which says why (the repeat count and the server's
bound, the server's own message quoted as typed), and never sent; a valid pattern afterwards is measured.

The bounds are the server's (/get_info "requestLimits"."pattern", sequence_salience/aggregate/patterns.py
PATTERN_BOUNDS); the page checks them in frontend/src/shared/aggregate/pattern.ts `checkPattern` (the regex box)
and frontend/src/salience/segments.ts `fetch` (no segment request). Leave one segment out is on screen
while the bomb is typed, so an unguarded page would send it. The valid pattern ("capital|France", two segments of
the shipped example: two forwards) is this file's own, so its leave-one-out result is computed here, never read
from another test's cache. The server's own refusal (4xx, fast, memory flat) is
tests/integration/test_client_mistakes.py.
Screenshots: artifacts/e2e/pattern_bomb/ (refusal.png, valid-after.png).
"""

from __future__ import annotations

import pytest

from sequence_salience.aggregate.patterns import PATTERN_BOUNDS, check_pattern
from sequence_salience.errors import SalienceError
from sequence_salience.methods import leave_one_out
from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

BOMB = "a{99999999}"
VALID = "capital|France"  # this file's own: "What is the capital of France?" has two matches
SIZE = plugin_checks.SMALL_SCREEN
TIMEOUT_MS = 300_000


def _server_message(pattern: str) -> str:
    """The server's refusal of `pattern`, with the pattern quoted as typed ("...", as the page quotes it; Python's
    message uses its repr)."""
    with pytest.raises(SalienceError) as refused:
        check_pattern(pattern)
    return str(refused.value).replace(repr(pattern), f'"{pattern}"')


def test_pattern_bomb_is_refused_in_the_page_and_never_sent(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    message = _server_message(BOMB)
    assert f"repeat count 99999999 at position 1 is above {PATTERN_BOUNDS.max_repeat:,}" in message, message
    # Every segment request body the page sends (LIT's /get_preds with our pattern field).
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.post_data or "") if "/get_preds" in r.url else None)

    mod = plugin_checks.open_lit(page, server_url, SIZE)
    assert page.evaluate("() => fetch('./get_info', {method: 'POST', headers: {'Content-Type': 'application/json'},"
                         " body: '{}'}).then(r => r.json()).then(j => j.requestLimits.pattern)") \
        == PATTERN_BOUNDS.as_json(), "the server does not publish its pattern bounds"
    plugin_checks.select_and_wait(page)
    mod.locator("select.granularity").select_option("regex")
    box = mod.locator("input.regex")

    # The bomb, typed and committed: the box's view says why at once.
    box.fill(BOMB)
    box.press("Enter")
    inline = mod.locator(".status.error")
    expect(inline).to_have_text(message)
    # A segment method on screen: it would measure the bomb's segments; the controller refuses instead.
    mod.locator("select.method").select_option("leave_one_out")
    status = mod.locator('.segment-status[data-method="leave_one_out"]')
    expect(status.locator(".error-text")).to_have_text(message)
    page.wait_for_timeout(500)  # past the box's typing pause: nothing else is on its way
    for el in (inline, status.locator(".error-text")):
        expect(el).to_be_in_viewport(ratio=1)  # whole, on screen
        assert el.evaluate("e => e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1"), \
            "the refusal is clipped"
    page.mouse.move(5, 5)
    plugin_checks.screenshot(page, artifacts_dir / "pattern_bomb", "refusal")
    bombs = [b for b in sent if "99999999" in b]
    assert not bombs, f"the page sent the refused pattern: {bombs[:1]}"

    # A valid pattern afterwards: sent, measured by leave one out, and its two segments coloured; no error left.
    box.fill(VALID)
    box.press("Enter")
    expect(status.locator(".error-text")).to_have_count(0)
    expect(inline).to_have_count(0)
    coloured = mod.locator('.prompt .seg[style*="background"]')
    expect(mod.locator(".precision")).to_contain_text(f"measured per regex match: {leave_one_out.METHOD.cost_unit};",
                                                      timeout=TIMEOUT_MS)
    expect(coloured).to_have_count(2)
    assert {t.strip() for t in coloured.all_inner_texts()} == set(VALID.split("|"))
    patterns = [d.get("pattern") for b in sent for d in plugin_checks.request_inputs(b)]
    assert VALID in patterns, f"the valid pattern was never sent: {set(patterns)}"
    assert BOMB not in patterns and not [b for b in sent if "99999999" in b], "the refused pattern was sent later"
    page.mouse.move(5, 5)
    plugin_checks.screenshot(page, artifacts_dir / "pattern_bomb", "valid-after")
    assert not external, f"requests to non-local hosts: {external}"
