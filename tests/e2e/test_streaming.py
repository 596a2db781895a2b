"""The response streams into the Sequence Salience module before the first highlight (issue 16).

Real server, real Chromium: a new prompt (never generated before, so generation really runs) is
added in the datapoint editor; while the model generates, the module shows the response as far as
it is generated and the progress line counts tokens; then the first highlight paints the whole
response, whose text continues what was streamed, and the per-token detail's progress follows.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

TAG = plugin_checks.SALIENCE_TAG
LOAD_TIMEOUT_MS = 600_000


def test_streamed_tokens_before_the_first_highlight(server_url, browser_page):
    from playwright.sync_api import expect

    page, external = browser_page
    mod = plugin_checks.open_lit(page, server_url)
    # A prompt nobody generated before (the disk cache would answer at once), with a long answer.
    prompt = f"Write a short story (ten sentences) about a robot named Unit {time.time_ns() % 10**9} who learns to paint."
    page.get_by_text("Editor", exact=True).first.click()
    editor = page.locator("single-datapoint-editor-module")
    editor.locator(".entry", has_text="prompt").first.locator("textarea").fill(prompt)
    editor.locator("button#make").click()

    # While the model generates: a partial response, the token count in the progress line, no highlight yet.
    streaming = mod.locator('.response.streaming[data-stream-state="running"]')
    streaming.filter(has_text=re.compile(r"\S")).wait_for(timeout=LOAD_TIMEOUT_MS)
    # One snapshot of the module (it re-renders at every token).
    snap = mod.evaluate("""m => {
      const r = m.shadowRoot, s = r.querySelector('.response.streaming');
      return {partial: s ? s.textContent : null, state: s ? s.dataset.streamState : null,
              tokens: s ? Number(s.dataset.tokens) : 0, status: r.querySelector('.status.loading')?.textContent ?? '',
              highlighted: r.querySelectorAll('.prompt .seg[style*="background"]').length,
              prompt: r.querySelector('.prompt')?.textContent ?? ''};
    }""")
    partial = snap["partial"]
    assert snap["state"] == "running" and partial and partial.strip() and snap["tokens"] >= 1, snap
    assert snap["highlighted"] == 0, snap  # the highlight comes after
    assert prompt in snap["prompt"], snap
    assert re.search(r"Generating the response: \d+ of at most 64 tokens", snap["status"]), snap

    # Then the first highlight: the whole response, which continues the streamed text.
    page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    assert mod.locator(".response.streaming").count() == 0
    assert mod.locator('.prompt .seg[style*="background"]').count() > 0
    response = mod.locator(".response").inner_text()
    assert response.strip().startswith(partial.strip()), (partial, response)
    assert "whole response" in mod.locator(".target-desc").inner_text()

    # Nothing the module showed before is lost: exact span first, the per-token detail with its progress after.
    precision = mod.locator(".precision")
    assert precision.get_attribute("data-exact") == "span"
    assert "exact for this span" in precision.inner_text()
    # (tests/e2e/test_progressive.py waits for the matrices themselves; here: their progress is shown)
    page.locator(f'{TAG} .precision[data-detail="running"], {TAG} .precision[data-detail="done"]').first.wait_for(
        state="attached", timeout=LOAD_TIMEOUT_MS)
    assert re.search(r"per-token detail (loading \d+%|ready)", precision.inner_text()), precision.inner_text()
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()
    assert not external
