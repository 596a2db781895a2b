"""The module in Debian Chromium without LIT or a model: a stand-in LitModule
(frontend/test/support/harness.ts) answering requests from a synthetic payload.

Covers what the real-server test cannot cheaply reach: a 4,000-token prompt
(render, retarget, granularity switch, scrolling), grad-norm spans fetched
from the server when the Gram matrix is not shipped, and errors shown in the
module. Timings are printed and saved, never asserted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.server_process import REPO

pytestmark = pytest.mark.e2e

FRONTEND = REPO / "frontend"
TAG = "prompt-salience-module"

SCROLL_JS = """async () => {
  const m = document.querySelector('prompt-salience-module');
  const box = m.shadowRoot.querySelector('.prompt');
  const gaps = [];
  let last = performance.now();
  await new Promise((res) => {
    let k = 0;
    function step(now) {
      gaps.push(now - last); last = now;
      box.scrollTop += 80;
      if (++k < 150) requestAnimationFrame(step); else res();
    }
    requestAnimationFrame(step);
  });
  gaps.shift();
  gaps.sort((a, b) => a - b);
  return {frames: gaps.length, p50: gaps[Math.floor(gaps.length / 2)],
          p95: gaps[Math.floor(gaps.length * 0.95)], max: gaps[gaps.length - 1],
          scrollHeight: box.scrollHeight, clientHeight: box.clientHeight};
}"""


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    esbuild = FRONTEND / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists():
        pytest.skip("frontend/node_modules is missing: run `cd frontend && npm ci`.")
    out = tmp_path_factory.mktemp("harness")
    subprocess.run([str(esbuild), "test/support/harness.ts", "--bundle", "--format=iife", "--target=es2020",
                    f"--outfile={out / 'harness.js'}"], cwd=FRONTEND, check=True, capture_output=True)
    (out / "index.html").write_text(
        '<!doctype html><html><body style="margin:0;font-family:sans-serif">'
        f'<div style="height:860px;width:1200px"><{TAG}></{TAG}></div>'
        '<script src="harness.js"></script></body></html>')
    return out


def _open(page, harness_dir: Path, query: str):
    page.goto((harness_dir / "index.html").as_uri() + "?" + query)
    mod = page.locator(TAG)
    mod.wait_for(state="attached")
    return mod


def _act(page, mod, name: str, action) -> float:
    mod.evaluate("e => { delete e.dataset.lastAction; delete e.dataset.lastActionMs; }")
    action()
    page.locator(f'{TAG}[data-last-action="{name}"]').wait_for(state="attached")
    return float(mod.get_attribute("data-last-action-ms"))


def test_long_prompt(browser_page, harness_dir, artifacts_dir):
    page, external = browser_page
    mod = _open(page, harness_dir, "n=4000&t=16&gram=1")
    timings = {}
    timings["select_to_painted_ms"] = _act(page, mod, "select", lambda: page.evaluate("ssHarness.select()"))
    words = mod.locator(".prompt .seg").count()
    assert words >= 4000
    assert mod.locator('.prompt .seg[style*="background"]').count() > 1000
    # One server call for the whole response: the Gram matrix covers all spans (besides at most one
    # request for the response as generated, sent with it: the harness answers it as done).
    assert page.evaluate("ssHarness.calls.length") == 1
    assert page.evaluate("ssHarness.streams.length") <= 1

    targets = mod.locator(".response .tgt")
    timings["retarget_click_ms"] = _act(page, mod, "retarget", lambda: targets.nth(3).click())
    timings["retarget_key_ms"] = _act(page, mod, "retarget", lambda: page.keyboard.press("ArrowRight"))
    timings["retarget_shift_key_ms"] = _act(page, mod, "retarget", lambda: page.keyboard.press("Shift+ArrowRight"))
    assert "tokens 5–6 of 16" in mod.locator(".target-desc").inner_text()
    timings["granularity_token_ms"] = _act(
        page, mod, "granularity", lambda: mod.locator("select.granularity").select_option("token"))
    assert mod.locator(".prompt .seg").count() == 4000
    timings["granularity_paragraph_ms"] = _act(
        page, mod, "granularity", lambda: mod.locator("select.granularity").select_option("paragraph"))
    assert mod.locator(".prompt .seg").count() < 100
    timings["granularity_word_ms"] = _act(
        page, mod, "granularity", lambda: mod.locator("select.granularity").select_option("word"))
    assert page.evaluate("ssHarness.calls.length") == 1, "retargeting or regrouping called the server"
    # Paragraphs have a default segment method: its measurement was asked for (and is not the gradient's).
    assert page.evaluate("ssHarness.segments.map(c => c.data.granularity)")[:1] == ["paragraph"]

    scroll = page.evaluate(SCROLL_JS)
    assert scroll["scrollHeight"] > 3 * scroll["clientHeight"]
    timings["scroll_frame_ms"] = scroll
    page.screenshot(path=str(artifacts_dir / "harness-4000-tokens.png"))
    assert not external
    (artifacts_dir / "harness_timings.json").write_text(json.dumps(timings, indent=2))
    print("\n4,000-token prompt timings (ms):", json.dumps(timings, indent=2))


def test_grad_norm_span_from_server_without_gram(browser_page, harness_dir):
    page, _ = browser_page
    mod = _open(page, harness_dir, "n=300&t=8&gram=0")
    _act(page, mod, "select", lambda: page.evaluate("ssHarness.select()"))
    calls = page.evaluate("ssHarness.calls")
    # The whole response spans 8 tokens: without a Gram matrix it is asked for.
    assert [c["data"].get("target_span") for c in calls] == [None, "0:8"]
    assert calls[1]["data"]["_id"] == "dp1~span0-8-0" and calls[1]["data"]["detail"] == "span"
    assert calls[1]["fields"] == ["span_salience", "salience"]
    assert mod.locator('.prompt .seg[style*="background"]').count() > 0
    targets = mod.locator(".response .tgt")
    _act(page, mod, "retarget", lambda: targets.nth(2).click())  # one token: its matrix row, no call
    assert page.evaluate("ssHarness.calls.length") == 2
    a, b = targets.nth(0).bounding_box(), targets.nth(1).bounding_box()
    page.mouse.move(a["x"] + 2, a["y"] + 4)
    page.mouse.down()
    page.mouse.move(b["x"] + 4, b["y"] + 4, steps=3)
    _act(page, mod, "retarget", lambda: page.mouse.up())
    assert page.evaluate("ssHarness.calls.map(c => c.data.target_span || null)")[-1] == "0:2"
    # Switching method to a linear one needs no call.
    mod.locator("select.method").select_option("grad_x_input")
    assert page.evaluate("ssHarness.calls.length") == 3
    assert mod.locator(".legend-title").inner_text().startswith("Signed")


def test_errors_shown_in_module(browser_page, harness_dir):
    page, _ = browser_page
    mod = _open(page, harness_dir, "n=50&t=4&fail=1")
    page.evaluate("ssHarness.select()")
    err = mod.locator(".status.error .error-text")
    err.wait_for()
    text = err.inner_text()
    assert "9,311 tokens" in text and "Fix: shorten the prompt." in text
    assert "Details" not in text and "Uncaught error" not in text and "Unknown error" not in text
    assert mod.get_attribute("data-state") == "error"
    assert mod.locator("button", has_text="Retry").count() == 1


def test_controls_regex_role_intensity_tooltip(browser_page, harness_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = _open(page, harness_dir, "n=120&t=6&gram=1")
    _act(page, mod, "select", lambda: page.evaluate("ssHarness.select()"))
    # Roles: one user segment and one assistant segment.
    mod.locator("select.granularity").select_option("role")
    assert mod.locator(".prompt .seg").count() == 1
    # Custom regex: runs of three words; an invalid pattern is explained, not thrown.
    mod.locator("select.granularity").select_option("regex")
    _type_pattern(mod, r"(?:\S+\s*){3}")
    expect(mod.locator(".prompt .seg")).to_have_count(40)  # matched in a worker: waits for it
    _type_pattern(mod, "(unclosed")
    assert mod.locator(".status.error").count() == 1
    mod.locator("select.granularity").select_option("word")
    assert mod.locator(".status.error").count() == 0
    # Intensity rescales the legend (values shown at full colour halve when intensity doubles).
    hi_before = float(mod.locator(".legend-labels span").last.inner_text())
    mod.locator("input.intensity").fill("2")
    hi_after = float(mod.locator(".legend-labels span").last.inner_text())
    assert hi_after == pytest.approx(hi_before / 2, rel=1e-3)
    # Tooltip with the exact value; the top list scrolls to its segment.
    mod.locator('.prompt .seg[style*="background"]').nth(3).hover()
    assert "salience " in mod.locator(".tooltip").inner_text()
    mod.locator(".top-item").first.click()
    assert mod.locator(".prompt .flash").count() == 1
    # Enter selects the focused target; Escape resets.
    mod.locator(".response .tgt").first.focus()
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    assert "token 6 of 6" in mod.locator(".target-desc").inner_text()
    page.keyboard.press("Escape")
    assert "whole response" in mod.locator(".target-desc").inner_text()


# Runs timer ticks in the page while a catastrophic pattern is applied; returns the longest gap between
# ticks (ms) over `ms` milliseconds: a pattern matched on the main thread blocks the ticks for its whole run.
MAIN_THREAD_GAP_JS = """async ([pattern, ms]) => {
  const m = document.querySelector('prompt-salience-module');
  const box = m.shadowRoot.querySelector('input.regex');
  let last = performance.now();
  let worst = 0;
  const t0 = last;
  box.value = pattern;
  box.dispatchEvent(new Event('change'));
  await new Promise((res) => {
    function tick() {
      const now = performance.now();
      worst = Math.max(worst, now - last);
      last = now;
      if (now - t0 < ms) setTimeout(tick, 10); else res();
    }
    setTimeout(tick, 10);
  });
  return worst;
}"""

# Exponential backtracking on the harness text ("w0 w1 ... w11. w12 ..."): alternatives that both match
# digits and spaces, and a "!" that never comes: tens of seconds on a main thread (node here: {1,16} 0.5 s, x2.7 per +2).
CATASTROPHIC = r"(?:[w\d ]|[\d ]){1,24}!"


def _regex_mode(page, harness_dir):
    """The module at 1280x720 with a 120-token prompt selected, segmented by a pattern."""
    page.set_viewport_size({"width": 1280, "height": 720})
    mod = _open(page, harness_dir, "n=120&t=6&gram=1")
    _act(page, mod, "select", lambda: page.evaluate("ssHarness.select()"))
    mod.locator("select.granularity").select_option("regex")
    return mod


def _type_pattern(mod, pattern: str) -> None:
    """Types `pattern` into the regex box and commits it, as a user leaving the box."""
    box = mod.locator("input.regex")
    box.fill(pattern)
    box.dispatch_event("change")


def test_slow_pattern_never_blocks_the_page(browser_page, harness_dir):
    """Issue 35 point 2: the pattern runs off the main thread and is stopped after the server's 1 s budget."""
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = _regex_mode(page, harness_dir)
    expect(mod.locator(".status.error")).to_have_count(0)
    worst_gap_ms = page.evaluate(MAIN_THREAD_GAP_JS, [CATASTROPHIC, 2500])
    print(f"\nlongest main-thread gap while the pattern ran: {worst_gap_ms:.0f} ms")
    # A responsiveness bound, not a speed claim: the pattern alone needs seconds on a main thread.
    assert worst_gap_ms < 500, f"the page's main thread was blocked for {worst_gap_ms:.0f} ms"
    err = mod.locator(".status.error")
    expect(err).to_contain_text("took longer than 1 s on this prompt")
    expect(err).to_contain_text("simplify it")
    assert CATASTROPHIC in err.inner_text()  # the pattern as typed
    # The page still works: tokens shown, the response clickable, a good pattern applies.
    mod.locator(".response .tgt").nth(1).click()
    expect(mod.locator(".target-desc")).to_contain_text("of 6")
    _type_pattern(mod, r"(?:\S+\s*){3}")
    expect(mod.locator(".prompt .seg")).to_have_count(40)
    expect(mod.locator(".status.error")).to_have_count(0)


def test_invalid_pattern_reported_as_typed(browser_page, harness_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = _regex_mode(page, harness_dir)
    _type_pattern(mod, "(unclosed")
    err = mod.locator(".status.error")
    expect(err).to_contain_text('regex pattern "(unclosed" is invalid')
    text = err.inner_text()
    assert "\\u{" not in text and "/gu" not in text, f"the internal translation leaked: {text}"
    assert "Fix" in text


def test_pattern_without_match_says_so_and_response_stays_clickable(browser_page, harness_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = _regex_mode(page, harness_dir)
    _type_pattern(mod, "zzz")
    expect(mod.locator(".pattern-note")).to_contain_text("No match")
    expect(mod.locator(".status.error")).to_have_count(0)
    # Single tokens stand in: a ranked list and a real legend, and each response token is a target.
    assert mod.locator(".top li").count() > 0
    assert mod.locator(".legend-labels span").last.inner_text() not in ("1", "1.00", "1.000")
    targets = mod.locator(".response .tgt")
    assert targets.count() == 6
    targets.nth(2).click()
    expect(mod.locator(".target-desc")).to_contain_text("token 3 of 6")


def test_one_token_answer_says_one_token(browser_page, harness_dir):
    """Issue 35 point 6: "(1 token)", not "(1 tokens)"."""
    from playwright.sync_api import expect

    page, _ = browser_page
    page.set_viewport_size({"width": 1280, "height": 720})
    mod = _open(page, harness_dir, "n=20&t=1&gram=1")
    _act(page, mod, "select", lambda: page.evaluate("ssHarness.select()"))
    expect(mod.locator(".target-desc")).to_contain_text("whole response (1 token)")
    assert "1 tokens" not in mod.locator(".target-desc").inner_text()
