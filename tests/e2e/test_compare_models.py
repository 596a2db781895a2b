"""Two models side by side in LIT's UI (`--models a:default,b:<folder>`), in Debian Chromium.

Model b is a tiny random Llama over the default model's tokenizer (tests/unit/tiny_models.py). Flow:
one model selected, the "Compare models" tab asks for two; select both models (LIT's `models` URL
state, what its model selector writes), select a prompt, open the tab: both responses are shown,
diff-marked, each equal to that model's own greedy answer (asked from the server directly), both
maps on one shared scale (the legend's end is the largest |value| of either side), the difference
and each answer's log p under both models.
"""

from __future__ import annotations

import json

import pytest

from lit_app import fields
from tests.server_process import ServerProcess
from tests.unit.tiny_models import save_tiny_llama_for

pytestmark = pytest.mark.e2e

TAG = "compare-models-module"
PROMPT = "What is the capital of France?"
TIMEOUT_MS = 300_000


@pytest.fixture(scope="module")
def two_model_server(tmp_path_factory):
    import sequence_salience as ss

    folder = save_tiny_llama_for(ss.load_model("default").tokenizer, tmp_path_factory.mktemp("tiny"))
    with ServerProcess(["--models", f"a:default,b:{folder}", "--max_new_tokens", "12"],
                       tmp_path_factory.mktemp("server")) as proc:
        yield proc


def test_switch_to_two_models_and_compare_them(two_model_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    server = two_model_server
    page, external = browser_page
    page.goto(server.url)  # sets the token cookie; LIT selects the first model, a
    page.locator("prompt-salience-module").wait_for(timeout=120_000)
    page.locator(".tab", has_text="Compare models").first.click()
    mod = page.locator(TAG)
    expect(mod.locator(".status")).to_contain_text("Select two models", timeout=60_000)

    # Both models selected (LIT's model selector state in the URL), a prompt selected.
    page.goto(f"{server.base_url}?models=a,b&layout=sequence_salience")
    page.locator("data-table-module tbody tr", has_text=PROMPT).first.click()
    page.locator(".tab", has_text="Compare models").first.click()
    page.locator(f'{TAG}[data-state="done"]').wait_for(state="attached", timeout=TIMEOUT_MS)

    want = {}
    for m in ("a", "b"):
        status, _, body = server.post_json(f"/get_preds?model={m}",
                                           {"inputs": [{"id": "x", "data": {fields.PROMPT: PROMPT}}]})
        assert status == 200, body
        want[m] = json.loads(body)[0][fields.RESPONSE]
    got_a = mod.locator(".response-a").inner_text()
    got_b = mod.locator(".response-b").inner_text()
    assert got_a.startswith("a") and got_a[1:].strip() == want["a"].strip()
    assert got_b.startswith("b") and got_b[1:].strip() == want["b"].strip()
    assert mod.locator(".response-a del.diff").count() + mod.locator(".response-b ins.diff").count() > 0

    # Both maps on one scale: every prompt segment carries both halves; the legend ends at the largest |value|.
    both = mod.locator(".view-both .seg.both")
    assert both.count() >= 5
    titles = both.evaluate_all("els => els.map(e => e.title)")
    values = []
    for t in titles:  # "a <v> · b <v> (kind)"
        parts = t.split(" · ")
        for part in parts:
            tok = part.split(" ")[1]
            if tok != "–":
                values.append(abs(float(tok)))
    legend = mod.locator(".legend-shared .legend-labels span").all_inner_texts()
    assert float(legend[-1]) == pytest.approx(max(values), rel=2e-3)
    assert mod.locator(".view-difference .diff-seg").count() >= 5
    rows = mod.locator("table.cross tr.cross-row")
    assert rows.count() == 2
    assert "a's answer" in rows.nth(0).inner_text() and "b's answer" in rows.nth(1).inner_text()
    page.screenshot(path=str(artifacts_dir / "compare-models.png"))
    assert not external, external
