"""Coarse-to-fine leave one word out in the Sequence Salience module, in a real browser against the real server
(issue 42: "word granularity shows the coarse-to-fine progress"): at word granularity with leave one segment
out chosen, the measure button runs coarse-to-fine (the server's request default at word), the status shows
its stages ("coarse pass", then "refining") while it runs, and the result hatches the words it did not
measure, each titled with the coarser unit that did not matter and that unit's value."""

from __future__ import annotations

import re
import time

import pytest

pytestmark = pytest.mark.e2e

TAG = "prompt-salience-module"
LOAD_TIMEOUT_MS = 300_000
ROW = "constitutional principles"  # 92 words in 9 sentences: coarse-to-fine measures ~34 rows (docs/benchmarks.md)


def test_the_word_button_runs_coarse_to_fine_with_its_stages_and_hatches_what_it_did_not_measure(
        server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    page.goto(server_url)
    mod = page.locator(TAG)
    mod.wait_for(timeout=120_000)
    mod.locator("select.granularity").select_option("word")
    page.locator("data-table-module tbody tr", has_text=ROW).first.click()
    page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    mod.locator("select.method").select_option("leave_one_out")

    # At word granularity nothing is measured until asked; the first button is coarse-to-fine, every word one
    # click away.
    button = mod.locator('.segment-status button.measure[data-method="coarse_to_fine"]')
    expect(button).to_contain_text("coarser units first")
    expect(mod.locator(".segment-status button.measure-all")).to_contain_text("Measure each word by removing it")
    button.click()

    # While it runs: its stages, from the job's own status.
    seen: list[str] = []
    deadline = time.monotonic() + LOAD_TIMEOUT_MS / 1000
    while time.monotonic() < deadline and mod.locator(".prompt .seg.unmeasured").count() == 0:
        text = mod.locator(".segment-status").first.inner_text() if mod.locator(".segment-status").count() else ""
        if "coarse pass" in text or "refining" in text:
            seen.append(text)
        page.wait_for_timeout(250)
    assert any("coarse pass" in t or "refining" in t for t in seen), "no coarse-to-fine stage was shown while it ran"
    assert any(re.search(r"(coarse pass|refining): \d+ / \d+", t) for t in seen), seen[:5]

    # Done: hatched words carry their unit's note, the facts say how many words were measured exactly.
    unmeasured = mod.locator(".prompt .seg.unmeasured")
    assert unmeasured.count() > 0
    titles = unmeasured.evaluate_all("els => els.map(e => e.getAttribute('title') || '')")
    note = r"inside a (sentence|paragraph|part of a sentence) that did not matter \(coarse value -?[0-9.e+-]+\)"
    assert all(re.fullmatch(note, t) for t in titles), titles[:5]
    expect(mod.locator(".segment-status .refined")).to_contain_text(re.compile(r"\d+ of \d+ words measured exactly"))
    expect(mod.locator(".precision")).to_contain_text("coarse-to-fine")
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()
    page.mouse.move(5, 5)
    page.screenshot(path=str(artifacts_dir / "coarse-to-fine-words.png"))
    assert not external, f"requests to non-local hosts: {external}"
