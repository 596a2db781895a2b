"""Issue 35 point 1 (first part) in the browser at 1280x720, against the real server on the default model:
the datapoint editor refuses, in words and before a row is added, what the server would refuse: an empty or
whitespace-only prompt, and a prompt longer than the server's --max_prompt_chars (published in /get_info).
Was: a whitespace-only prompt was added as a row (its salience then failed with "The prompt is empty"), and a
40,000-character prompt was refused only in LIT's status bar, behind "(and 1 other error)".

Screenshots go to artifacts/e2e/true_errors/.
"""

from __future__ import annotations

import pytest

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
    """Its own server, not the session's: --max_prompt_chars 300, so that a shipped row (the few-shot case,
    384 characters) is refused by the server itself (LIT's editor refuses a typed one before it is added, so a
    refused request can only come from a row that was already there, as from a dataset loaded at start)."""
    from tests.server_process import ServerProcess

    with ServerProcess(["--host", "127.0.0.1", "--max_prompt_chars", "300"],
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
