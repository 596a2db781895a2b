"""Issue 35 in the browser at 1280x720, against the real server on the default model: changing IG's steps while
IG runs, as the last user check did ("simple question" row, Method -> Integrated gradients, steps changed while
the IG span request runs).

- LIT's status bar shows no "Cancelled: ..." for the superseded request (was: LIT's ApiService reported the
  server's 409 "Cancelled: a newer selection replaced this request" to its status service, and it stayed red
  at the bottom of the page for the whole newer run), while a real error (a 400 naming its cause) still shows
  there;
- the new run's progress line shows no "100 %" or "finishing…" before its first real progress (was: "100 % ·
  finishing…" for about a second, then "3 %").

Screenshots go to artifacts/e2e/superseded_span/.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

SIMPLE = "What is the capital of France?"
LOADING = ".texts .status.loading.inline"
STATUS_BAR = "lit-app-statusbar"
# A percentage below 100: progress of the IG steps themselves.
FIRST = plugin_checks.IG_STEPS_OF_ITS_OWN["superseded_first"]
NEW = plugin_checks.IG_STEPS_OF_ITS_OWN["superseded_new"]
REAL_PROGRESS = re.compile(r"(?<!\d)\d{1,2} %")
# A salience request the server refuses with a 400 naming the cause, sent through LIT's own ApiService (as every
# module's request is), so that LIT's status service hears of it as of any failed request.
REFUSED_REQUEST_JS = """async (e) => {
  const model = e.ctl.salienceModel;
  const bad = {id: 'empty-prompt', data: {prompt: '   ', target: '', _id: 'empty-prompt'}, meta: {added: true}};
  try { await e.apiService.getPreds([bad], model, e.appState.currentDataset, [], ['salience'], 'A refused request'); }
  catch (err) { return String(err.message).split('\\n')[0]; }
  return '';
}"""


def _shot(page, artifacts_dir, name: str) -> None:
    plugin_checks.screenshot(page, artifacts_dir / "superseded_span", name)


def test_changing_ig_steps_mid_run_leaves_no_cancellation_in_the_status_bar_and_no_stale_progress(
        server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = plugin_checks.open_lit(page, server_url, plugin_checks.SMALL_SCREEN)
    bar = page.locator(STATUS_BAR)
    plugin_checks.record_texts(bar, ".status-info", "__ssStatusBar")  # every text LIT's status bar shows
    plugin_checks.select_and_wait(page, SIMPLE, until='[data-last-action="select"]')
    mod.locator("select.method").select_option("integrated_gradients")
    steps = mod.locator("input.ig-steps")
    steps.fill(str(FIRST))  # runs for long enough to change the count while it runs
    steps.dispatch_event("change")
    line = mod.locator(LOADING)
    expect(line).to_contain_text(re.compile(rf"\({FIRST} steps\).*%"), timeout=120_000)  # it runs on the server

    plugin_checks.record_texts(mod, ".status.loading span", "__ssLoading")
    reads = []  # the span_progress answers: what the page read as progress

    def on_response(r) -> None:
        if "_salience" in r.url and r.ok and '"span_progress"' in (r.request.post_data or ""):
            try:
                reads.append(r.json()[0]["salience"]["detail"])
            except (ValueError, KeyError, IndexError, TypeError):
                pass

    page.on("response", on_response)
    superseded = lambda r: "_salience" in r.url and r.status == 409
    with page.expect_response(superseded, timeout=60_000) as cancelled:
        steps.fill(str(NEW))
        steps.dispatch_event("change")
    # Superseded by the newer request, or stopped by the cancel the page sends with it: whichever came first.
    assert cancelled.value.text().startswith("Cancelled: "), cancelled.value.text()
    expect(line).to_contain_text(re.compile(rf"\({NEW} steps\).*(?<!\d)\d{{1,2}} %"), timeout=120_000)
    _shot(page, artifacts_dir, "new-count-running")

    shown = page.evaluate("window.__ssStatusBar")
    cancellations = [t for t in shown if "Cancelled" in t]
    loading = page.evaluate("window.__ssLoading")
    new_run = [t for t in loading if f"({NEW} steps)" in t]
    first_real = next((i for i, t in enumerate(new_run) if REAL_PROGRESS.search(t)), None)
    assert first_real is not None, f"no progress of the new run was recorded: {loading}"
    stale = [t for t in new_run[:first_real] if "100 %" in t or "finishing" in t]
    print(f"\nthe new run's lines up to its first progress: {new_run[:first_real + 1]}\n"
          f"span_progress reads: {json.dumps(reads[:6])}\nstatus bar: {shown}")
    assert not cancellations and not stale, (
        f"LIT's status bar showed a cancellation: {cancellations}\n"
        f"the new run showed a finished progress before its own: {stale}\nevery line: {loading}")

    # A real error still reaches the status bar. A later progress read of the same URL takes it away again
    # (LIT's status service keys errors by URL): read the recorder, not the bar as it is now.
    refused = mod.evaluate(REFUSED_REQUEST_JS)
    assert refused.startswith("The prompt is empty"), refused
    page.wait_for_function("t => window.__ssStatusBar.some(s => s.includes(t))", arg=refused, timeout=10_000)
