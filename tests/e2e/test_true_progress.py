"""Issue 35 point 4 in the browser at 1280x720, against the real server on the default model: progress
that is true.

- an IG step count outside 1..256 (0, 300, 100000) is refused next to its field with the allowed range, and
  no request goes (was: silently ignored);
- switching from a running IG span to another method drops IG's progress line at once and sends a cancel
  naming the IG job's id, which the server finds running (was: the line stayed over the new method's map
  until IG ended, and IG ran on);
- the IG progress line never claims "about 1 s left" at 100 % or with most steps to go, and its time left is a
  range from the recent steps' rate (issue 43: "about 40–70 s left"; it may grow when the steps slow down), its
  upper end never below its lower (recorded every 250 ms while RECORDED_STEPS steps run).

Screenshots go to artifacts/e2e/true_progress/.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 300_000
SIMPLE = "What is the capital of France?"
LOADING = ".texts .status.loading.inline"
# IG steps of the recorded run: 112 is 14 chunks of 8 (128 took 20 s idle and showed 19 time-left estimates; two
# are needed), and at 89 % it still leaves 12 steps, about 2 s even idle, so "about 1 s left" below 90 % stays
# a wrong claim; 160 (96 s of a worker in a fresh-clone run) and 256 tested nothing more. Each run's count is its
# own (plugin_checks.IG_STEPS_OF_ITS_OWN: the session's server answers a count it completed from its cache).
RECORDED_STEPS = plugin_checks.IG_STEPS_OF_ITS_OWN["recorded"]
SWITCHED_STEPS = plugin_checks.IG_STEPS_OF_ITS_OWN["switched_away"]


def _open_and_select(page, url: str):
    return plugin_checks.open_and_select(page, url, SIMPLE, until='[data-last-action="select"]')


def _shot(page, artifacts_dir, name: str) -> None:
    plugin_checks.screenshot(page, artifacts_dir / "true_progress", name)


def test_out_of_range_ig_steps_are_refused_with_the_range(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = _open_and_select(page, server_url)
    mod.locator("select.method").select_option("integrated_gradients")
    steps = mod.locator("input.ig-steps")
    expect(steps).to_have_count(1)
    sent = []  # ig_steps of every salience request from now on (selecting IG may still send its 16; 0 is "off")
    page.on("request", lambda r: sent.extend(d.get("ig_steps") for d in plugin_checks.request_inputs(r.post_data)) if "_salience" in r.url else None)
    for typed in ("0", "300", "100000"):
        steps.fill(typed)
        steps.dispatch_event("change")
        refusal = mod.locator(".count-error")
        expect(refusal).to_have_text(re.compile(rf"IG steps must be a whole number from 1 to 256, not {typed}; "
                                                r"still using \d+\."))
    _shot(page, artifacts_dir, "ig-steps-refused")
    assert not {300, 100000} & set(sent), f"a refused count was sent to the server: {sent}"
    steps.fill(str(plugin_checks.IG_STEPS_OF_ITS_OWN["accepted_after_refusals"]))
    steps.dispatch_event("change")
    expect(mod.locator(".count-error")).to_have_count(0)


def test_switching_away_from_ig_drops_its_progress_line(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = _open_and_select(page, server_url)
    mod.locator("select.method").select_option("integrated_gradients")
    steps = mod.locator("input.ig-steps")
    steps.fill(str(SWITCHED_STEPS))  # long enough to switch while it runs
    steps.dispatch_event("change")
    line = mod.locator(LOADING)
    expect(line).to_contain_text(f"Integrated gradients ({SWITCHED_STEPS} steps)", timeout=30_000)
    _shot(page, artifacts_dir, "ig-running")
    # A progress read of this job showed its percentage: that read gave the page the job's id, which its cancel names
    # (frontend/src/salience/span_requests.ts `followJob`). Was a fixed 2.5 s, which a busy machine can outlast.
    expect(line).to_contain_text(re.compile(r"\d+ %"), timeout=TIMEOUT_MS)
    cancels = lambda r: "get_preds" in r.url and '"span_cancel"' in (r.request.post_data or "")
    with page.expect_response(cancels, timeout=5_000) as stopped:
        mod.locator("select.method").select_option("grad_x_input")
    expect(mod.locator(LOADING)).to_have_count(0, timeout=1_000)
    # The server found the job the cancel names (running until then) and stops it within one chunk.
    status = stopped.value.json()[0]["salience"]["detail"]
    assert status["state"] == "running" and status["job_id"].startswith("span-"), status
    _shot(page, artifacts_dir, "switched-to-grad-x-input")


def test_ig_progress_never_sits_at_one_second_and_never_counts_up(server_url, browser_page, artifacts_dir):
    page, _ = browser_page
    mod = _open_and_select(page, server_url)
    mod.locator("select.method").select_option("integrated_gradients")
    steps = mod.locator("input.ig-steps")
    steps.fill(str(RECORDED_STEPS))
    steps.dispatch_event("change")
    seen: list[str] = []
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    started = False
    while time.monotonic() < deadline:
        texts = mod.locator(LOADING).all_inner_texts()
        if texts:
            started = True
            if not seen or seen[-1] != texts[0]:
                seen.append(texts[0])
        elif started:
            break
        page.wait_for_timeout(250)
    assert started and not mod.locator(LOADING).count(), f"IG did not finish: {seen[-3:]}"
    _shot(page, artifacts_dir, "ig-done")
    assert any("%" in t for t in seen), f"no progress was shown: {seen}"
    for text in seen:
        assert not re.search(r"100 % · about", text), f"time left claimed with every step done: {text!r}"
    lefts = []
    for text in seen:
        m = re.search(r"(\d+) % · about (\d+)(?:–(\d+))? (s|min) left", text)
        if m:
            unit = 60 if m.group(4) == "min" else 1
            low, high = int(m.group(2)) * unit, int(m.group(3) or m.group(2)) * unit
            assert low <= high, f"an inverted range: {text!r}"
            assert int(m.group(1)) >= 90 or text.find("about 1 s left") < 0, f"about 1 s left with steps to go: {text!r}"
            lefts.append((low, high))
    # Two estimates at least, or the checks above would hold of nothing.
    assert len(lefts) >= 2, f"fewer than two time-left estimates were shown: {seen}"
    print(f"\n{len(lefts)} time-left estimates seen: {lefts}")
