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
