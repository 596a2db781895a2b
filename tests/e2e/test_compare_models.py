"""Two models side by side in LIT's UI (`--models a:default,b:<folder>`), in Debian Chromium.

Model b is a tiny random Llama over the default model's tokenizer (tests/unit/tiny_models.py). Flow:
LIT opens with model a; the salience module explains a's answer and shows no "Compare models" section
(one model). Click b in LIT's model selector (the toolbar's model buttons): both selected, the section
appears inside the salience module; its "Compare models" toggle (mouse) opens it: both responses,
diff-marked, each equal to that model's own greedy answer (asked from the server directly), both maps on
one shared scale (the legend's end is the largest |value| of either side), the difference and each
answer's log p under both models; sentence granularity in the module gives fewer, longer aligned
segments there. The toggle closes and opens again from the keyboard (Enter, Space). Click a off: the
section is gone and the salience module explains b's answer.
"""

from __future__ import annotations

import json
import re

import pytest

from lit_app import fields
from tests.server_process import ServerProcess
from tests.unit.tiny_models import save_tiny_llama_for

pytestmark = pytest.mark.e2e

SALIENCE = "prompt-salience-module"
PROMPT = "What is the capital of France?"
TIMEOUT_MS = 300_000


@pytest.fixture(scope="module")
def two_model_server(tmp_path_factory):
    """Its own process, not the session's `lit_server`: two models (--models)."""
    import sequence_salience as ss

    folder = save_tiny_llama_for(ss.load_model("default").tokenizer, tmp_path_factory.mktemp("tiny"))
    with ServerProcess(["--models", f"a:default,b:{folder}", "--max_new_tokens", "12"],
                       tmp_path_factory.mktemp("server")) as proc:
        yield proc


def test_switch_to_two_models_and_compare_them(two_model_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    server = two_model_server
    page, external = browser_page
    want = {}
    for m in ("a", "b"):
        status, _, body = server.post_json(f"/get_preds?model={m}",
                                           {"inputs": [{"id": "x", "data": {fields.PROMPT: PROMPT}}]})
        assert status == 200, body
        want[m] = json.loads(body)[0][fields.RESPONSE]
    assert want["a"].strip() != want["b"].strip()

    page.goto(server.url)  # LIT selects the first model, a
    salience = page.locator(SALIENCE)
    salience.wait_for(timeout=120_000)
    page.locator("data-table-module tbody tr", has_text=PROMPT).first.click()
    page.locator(f"{SALIENCE}[data-state=ready]").wait_for(state="attached", timeout=TIMEOUT_MS)
    assert salience.locator(".body .response").inner_text().strip() == want["a"].strip()
    mod = salience.locator(".compare-models")
    assert salience.get_attribute("data-compare-models") == "off"
    assert mod.count() == 0  # one model: no section
    assert page.locator(".tab", has_text="Compare models").count() == 0  # no tab of its own any more

    # LIT's model selector: add b. The section appears, closed (nothing asked yet); the toggle opens it.
    model_button = lambda name: page.locator("button.headline-button", has=page.locator(
        "span.headline-button-text", has_text=re.compile(f"^{name}$")))
    model_button("b").click()
    toggle = mod.locator("button.toggle", has_text="Compare models")
    expect(toggle).to_have_attribute("aria-expanded", "false", timeout=60_000)
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    page.locator(f'{SALIENCE}[data-compare-models="done"]').wait_for(state="attached", timeout=TIMEOUT_MS)
    assert mod.locator(".crow .who").all_inner_texts() == ["a", "b"]
    assert mod.locator(".response-a").inner_text().strip() == want["a"].strip()
    assert mod.locator(".response-b").inner_text().strip() == want["b"].strip()
    assert mod.locator(".response-a del.diff").count() + mod.locator(".response-b ins.diff").count() > 0

    # Both maps on one scale: each scored prompt segment shows both values (two halves); the legend ends at the
    # largest |value|.
    both = mod.locator(".view-both .cseg:not(.markup)")
    assert both.count() >= 5
    assert sum("linear-gradient" in s for s in both.evaluate_all("els => els.map(e => e.getAttribute('style'))")) >= 5
    titles = both.evaluate_all("els => els.map(e => e.title)")
    values = []
    for t in titles:  # "a <v> · b <v> · Δ <v>"
        for part in t.split(" · ")[:2]:
            tok = part.split(" ")[1]
            if tok != "–":
                values.append(abs(float(tok)))
    legend = mod.locator(".legend-shared .legend-labels span").all_inner_texts()
    assert float(legend[-1]) == pytest.approx(max(values), rel=2e-3)
    diff_styles = mod.locator(".view-difference .cseg:not(.markup)").evaluate_all(
        "els => els.map(e => e.getAttribute('style') || '')")
    assert sum(s.startswith("background:") for s in diff_styles) >= 5
    assert not any("linear-gradient" in s for s in diff_styles)
    rows = mod.locator("table.cross tr.cross-row")
    assert rows.count() == 2
    assert "a's answer" in rows.nth(0).inner_text() and "b's answer" in rows.nth(1).inner_text()
    page.screenshot(path=str(artifacts_dir / "compare-models.png"))

    # The segments follow the module's granularity: sentences, fewer of them, same scale rule.
    n_words = both.count()
    salience.locator("select.granularity").select_option("sentence")
    expect(mod.locator(".models-head .granularity")).to_have_text("sentence", timeout=60_000)
    assert 0 < mod.locator(".view-both .cseg:not(.markup)").count() < n_words

    # The keyboard: Enter on the toggle closes the section, Space opens it again (answers from the room's state).
    toggle.focus()
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    assert mod.locator(".view-both").count() == 0
    page.keyboard.press("Space")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    page.locator(f'{SALIENCE}[data-compare-models="done"]').wait_for(state="attached", timeout=TIMEOUT_MS)
    assert mod.locator(".response-b").inner_text().strip() == want["b"].strip()

    # Switch to b alone: the section is gone and the salience module explains b's answer.
    model_button("a").click()
    expect(mod).to_have_count(0, timeout=60_000)
    expect(salience.locator(".body .response")).to_have_text(
        re.compile(r"\s*" + re.escape(want["b"].strip()) + r"\s*"), timeout=TIMEOUT_MS)
    assert not external, external
