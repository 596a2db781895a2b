"""examples/own_lit_server.py: LIT's own dev_server with a user's dataset, our wrappers and a mixed layout.

Runs the example as a user would (its own process, its printed URL), then checks in Chromium
that the user's layout is the page's (LIT's data table, datapoint editor and generated text
beside our three modules), that our modules work there (first highlight for the user's own
question, the inside module following it, the test module answering), that LIT's own Sequence
Salience module in the same page explains a clicked span with our salience model (one
`target_mask` request), and that LIT's app is behind our request rules (no token, a cross-site
POST, a form body: refused).
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from tests.e2e import plugin_checks
from tests.server_process import REPO, ServerProcess

pytestmark = pytest.mark.e2e

EXAMPLE = REPO / "examples" / "own_lit_server.py"


@pytest.fixture(scope="module")
def example_server(tmp_path_factory):
    """Its own process: the example script, not our server."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with ServerProcess(["--max_new_tokens", "24"], tmp_path_factory.mktemp("own"), own_client_root=False,
                       command=[sys.executable, str(EXAMPLE)], env=env) as server:
        yield server


def test_example_serves_lits_app_behind_our_rules(example_server):
    status, _, body = example_server.post_json("/get_info", {})
    assert status == 200, body[:300]
    info = json.loads(body)
    assert info["defaultLayout"] == "travel" and {"travel", "sequence_salience"} <= set(info["layouts"])
    assert info["pageTitle"] == "Travel questions"
    assert list(info["datasets"]) == ["travel"] or "travel" in info["datasets"]
    assert {"travel_lm", "_travel_lm_salience", "_travel_lm_tokenizer", "_travel_lm_explain"} <= set(info["models"])
    # Our rules in front of LIT's app: no token, a foreign origin, a form body: all refused.
    assert example_server.post_json("/get_info", {}, auth=False)[0] in (401, 403)
    assert example_server.post_json("/get_info", {}, headers={"Origin": "http://evil.example"})[0] == 403
    assert example_server.request("POST", "/get_info", "a=1",
                                  {"Content-Type": "application/x-www-form-urlencoded"})[0] in (400, 403, 415)


def test_a_wrappers_client_mistake_is_400_in_lits_own_server(example_server):
    # LIT's app alone answers our wrappers' RequestError with 500; plugin.adapt marks it, as our app does.
    body = {"inputs": [{"id": "a", "data": {"prompt": "What is 2+2?", "target": " 4", "target_span": "5:9"}}]}
    status, _, text = example_server.post_json("/get_preds?model=_travel_lm_salience", body)
    assert status == 400 and '"target_span"' in text.split("\n")[0], (status, text[:300])
    assert example_server.post_json("/get_info", {})[0] == 200  # and it keeps serving


def test_mixed_layout_with_lits_modules_and_lits_own_salience_module(example_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    mask_requests = []
    mask_answers = []
    page.on("request", lambda r: mask_requests.append(r.post_data) if (
        "_travel_lm_salience" in r.url and r.post_data and '"target_mask"' in r.post_data) else None)
    page.on("response", lambda r: mask_answers.append(r.status) if (
        "_travel_lm_salience" in r.url and r.request.post_data and '"target_mask"' in r.request.post_data) else None)
    seen = plugin_checks.three_modules_and_first_highlight(page, example_server.url)
    assert "Paris" in seen["response"], seen
    # LIT's own modules of the user's layout, in the same page.
    expect(page.locator("data-table-module")).to_contain_text("capitals")  # the user's own column
    page.locator(".tab", has_text="Editor").first.click()
    editor = page.locator("single-datapoint-editor-module")
    editor.locator("textarea").first.wait_for()
    values = editor.locator("textarea").evaluate_all("els => els.map(e => e.value)")
    assert plugin_checks.EXAMPLE_PROMPT in values, values
    page.locator(".tab", has_text="Generated").first.click()
    expect(page.locator("generated-text-module")).to_contain_text("Paris", timeout=120_000)
    page.screenshot(path=str(artifacts_dir / "plugin-own-server.png"))
    assert not external, f"the page reached outside the machine: {external[:5]}"

    # Interop (a): LIT's own Sequence Salience module, in the same page, explains a clicked span
    # with our salience model.
    page.locator(".tab", has_text="LIT's Sequence Salience").first.click()
    lit = page.locator("sequence-salience-module")
    lit.locator(".interstitial-target-option", has_text="Paris").first.click()  # our generation model's response
    chips = lit.locator("sequence-salience-chips .salient-token")
    expect(chips.first).to_be_visible(timeout=120_000)
    texts = chips.all_inner_texts()
    assert any("France" in t for t in texts) and any("Paris" in t for t in texts), texts
    # Its method buttons are our salience model's TokenScores fields (LIT's names).
    expect(lit.locator("#method-selector")).to_contain_text("grad_l2")
    expect(lit.locator("#method-selector")).to_contain_text("grad_dot_input")
    assert not mask_requests
    chips.filter(has_text="Paris").last.click()
    expect(lit.locator(".target-info-line", has_text="Explaining")).to_contain_text("Paris", timeout=30_000)

    def weights() -> list[float]:
        return [float(w) for w in lit.locator("sequence-salience-chips lit-tooltip").evaluate_all(
            "els => els.map(e => e.getAttribute('content'))") if w not in (None, "")]

    deadline = time.monotonic() + 120
    while not any(v > 0 for v in weights()) and time.monotonic() < deadline:
        page.wait_for_timeout(500)
    values = weights()
    assert mask_answers == [200], (mask_answers, example_server.log_tail())
    assert sum(v > 0 for v in values) >= 3, values  # prompt words coloured by grad_l2 of the clicked span
    assert len(mask_requests) == 1, mask_requests  # one request per click, as with LIT's own models
    sent = json.loads(mask_requests[0])["inputs"][0]["data"]
    assert sum(sent["target_mask"]) >= 1 and "Paris" in sent["target"]
