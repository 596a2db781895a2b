"""Issue 35 point 1 (first part) in the browser at 1280x720, against the real server on the default model:
the datapoint editor refuses, in words and before a row is added, what the server would refuse: an empty or
whitespace-only prompt, and a prompt longer than the server's --max_prompt_chars (published in /get_info).
Was: a whitespace-only prompt was added as a row (its salience then failed with "The prompt is empty"), and a
40,000-character prompt was refused only in LIT's status bar, behind "(and 1 other error)". Likewise the IG steps
field refuses counts above a lower `--max_ig_steps` of the server, with that range, before any request (was: the
browser allowed the rule's 1..256 and the server answered a 400 the page showed as an error); the server publishes
its count limits in /get_info "requestLimits".

Screenshots go to artifacts/e2e/true_errors/.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

SALIENCE = "prompt-salience-module"
SIZE = {"width": 1280, "height": 720}
SIMPLE = "What is the capital of France?"
EDITOR = "single-datapoint-editor-module"


def test_editor_refuses_what_the_server_would_refuse(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    page.set_viewport_size(SIZE)
    page.goto(server_url)
    page.locator(SALIENCE).wait_for(timeout=120_000)
    page.locator("data-table-module tbody tr", has_text=SIMPLE).first.click()
    page.get_by_text("Editor", exact=True).first.click()
    editor = page.locator(EDITOR)
    box = editor.locator(".entry", has_text="prompt").first.locator("textarea")
    add, refusal = editor.locator("button#make"), editor.locator(".ss-add-refusal")
    out = artifacts_dir / "true_errors"
    out.mkdir(parents=True, exist_ok=True)

    box.fill("   \n\t  ")
    box.dispatch_event("input")
    expect(add).to_be_disabled()
    expect(refusal).to_have_text("The prompt is only spaces or line breaks: type a prompt to add this row.")
    page.screenshot(path=str(out / "whitespace-prompt.png"))

    box.fill("x" * 40_000)
    box.dispatch_event("input")
    expect(add).to_be_disabled()
    expect(refusal).to_contain_text("40,000 characters; this server accepts up to 32,000 (--max_prompt_chars)")
    page.screenshot(path=str(out / "long-prompt.png"))

    box.fill("What is the capital of Italy?")
    box.dispatch_event("input")
    expect(add).to_be_enabled()
    expect(refusal).to_have_count(0)


@pytest.fixture(scope="module")
def small_limit_server(tmp_path_factory):
    """Its own server, not the session's, with two lower limits (start-up flags), one per test of this module that
    reads it: --max_prompt_chars 300, so that a shipped row (the few-shot case, 384 characters) is refused by the
    server itself (LIT's editor refuses a typed one before it is added, so a refused request can only come from a
    row that was already there, as from a dataset loaded at start); --max_ig_steps 32 (the session server keeps the
    rule's 256). One server for both: a start costs 6-8 s of CPU (they were two, in two files; docs/benchmarks.md,
    "Session 40 (h3)")."""
    from tests.server_process import ServerProcess

    with ServerProcess(["--host", "127.0.0.1", "--max_prompt_chars", "300", "--max_ig_steps", "32"],
                       tmp_path_factory.mktemp("small_limit"), own_client_root=False) as proc:
        yield proc


def test_each_view_drops_its_error_once_a_newer_request_succeeds(small_limit_server, browser_page, artifacts_dir):
    """Issue 35 point 1: each view shows the error of its own latest request and clears it when that request is
    superseded: the salience module (a row the server refuses, then a valid row) and Test this explanation (a
    contrast the server refuses, then a valid one)."""
    from playwright.sync_api import expect

    page, _ = browser_page
    page.set_viewport_size(SIZE)
    page.goto(small_limit_server.url)
    mod = page.locator(SALIENCE)
    mod.wait_for(timeout=120_000)
    out = artifacts_dir / "true_errors"
    out.mkdir(parents=True, exist_ok=True)

    page.locator("data-table-module tbody tr", has_text="Classify the sentiment").first.click()
    error = mod.locator(".status.error")
    expect(error).to_contain_text("384 characters; this server accepts up to 300 (--max_prompt_chars)",
                                  timeout=120_000)
    page.screenshot(path=str(out / "refused-row.png"))
    page.locator("data-table-module tbody tr", has_text=SIMPLE).first.click()
    page.locator(f"{SALIENCE}[data-state=ready]").wait_for(state="attached", timeout=300_000)
    expect(error).to_have_count(0)
    expect(mod.locator(".response")).to_contain_text("Paris")
    response = mod.evaluate("e => Array.from(e.payload.text).slice(e.payload.prompt_end).join('')")
    page.screenshot(path=str(out / "refused-row-then-valid.png"))

    # Test this explanation: a foil that is the target itself is refused by the server; a real foil then runs.
    page.locator(".tab", has_text="Test this explanation").first.click()
    explain = page.locator("explain-test-module")
    explain.locator("button.tab-btn.contrastive").click()
    foil, run = explain.locator("input.foil"), explain.locator("button.run.contrastive")
    foil.fill(response)
    run.click()
    expect(explain.locator(".status.error")).to_contain_text("The foil is the same text as the target",
                                                             timeout=300_000)
    page.screenshot(path=str(out / "refused-foil.png"))
    foil.fill("London.")
    run.click()
    expect(explain.locator("div.contrastive .difference")).to_be_visible(timeout=300_000)
    expect(explain.locator(".status.error")).to_have_count(0)
    page.screenshot(path=str(out / "refused-foil-then-valid.png"))


def test_ig_steps_above_the_servers_max_are_refused_with_its_range(small_limit_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    mod = plugin_checks.open_and_select(page, small_limit_server.url, SIMPLE)
    mod.locator("select.method").select_option("integrated_gradients")
    steps = mod.locator("input.ig-steps")
    sent = []  # ig_steps of every salience request from now on
    page.on("request", lambda r: sent.extend(d.get("ig_steps") for d in plugin_checks.request_inputs(r.post_data))
            if "_salience" in r.url else None)
    for typed in ("33", "100", "256"):
        steps.fill(typed)
        steps.dispatch_event("change")
        expect(mod.locator(".count-error")).to_have_text(re.compile(
            rf"IG steps must be a whole number from 1 to 32, not {typed}; still using \d+\."))
    plugin_checks.screenshot(page, artifacts_dir / "true_errors", "ig-steps-above-server-max")
    expect(steps).to_have_attribute("max", "32")
    assert not {33, 100, 256} & set(sent), f"a count above the server's --max_ig_steps was sent: {sent}"
    steps.fill("32")
    steps.dispatch_event("change")
    expect(mod.locator(".count-error")).to_have_count(0)
    # What the page read: the server's published count limit.
    status, _, text = small_limit_server.post_json("/get_info", {})
    assert status == 200 and json.loads(text)["requestLimits"]["max_counts"]["ig_steps"] == 32, text[:300]
