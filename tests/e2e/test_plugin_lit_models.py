"""Interop (b): our salience module over a LIT user's own prompt-debugging models, in Chromium.

examples/lit_models_with_our_module.py serves LIT's HFGenerativeModel + HFSalienceModel +
HFTokenizerModel over the default model's weights (converted folder, offline) with our modules
in the layout. The module must find their fields, paint the whole response from one salience
request with the response masked, paint a clicked span from one more request with that span
masked, and say which extras need our wrappers; the inside module names the models it misses.
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

EXAMPLE = REPO / "examples" / "lit_models_with_our_module.py"
TAG = plugin_checks.SALIENCE_TAG


def test_our_module_reads_lits_own_prompt_debugging_models(tmp_path, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # Its own process: the example script (LIT's own models), not our server.
    with ServerProcess(["--max_length", "16"], tmp_path, own_client_root=False,
                       command=[sys.executable, str(EXAMPLE)], env=env) as server:
        page, external = browser_page
        sent = []
        page.on("request", lambda r: sent.append((r.url, r.post_data)) if "/get_preds" in r.url else None)

        def salience_masks() -> list[list[int]]:
            return [json.loads(body)["inputs"][0]["data"]["target_mask"] for url, body in sent
                    if "model=_lit_lm_salience" in url and body and '"target_mask"' in body]

        page.goto(server.url)
        mod = page.locator(TAG)
        mod.wait_for(timeout=120_000)
        plugin_checks.select_example(page, "The capital of France is")
        page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached", timeout=plugin_checks.LOAD_TIMEOUT_MS)
        assert plugin_checks.highlighted_segments(mod) > 0, "no highlighted prompt segment"
        assert "whole response" in mod.locator(".target-desc").inner_text()
        masks = salience_masks()
        assert len(masks) == 1, masks  # the whole response: one request
        n_prompt = masks[0].index(1)
        assert set(masks[0][:n_prompt]) == {0} and set(masks[0][n_prompt:]) == {1}
        expect(mod).to_contain_text("need Sequence Salience's wrappers")  # the extras name what they need
        before = mod.locator(".prompt .seg").evaluate_all("els => els.map(e => e.getAttribute('style') || '')")

        targets = mod.locator(".response .tgt")
        assert targets.count() >= 2, mod.locator(".response").inner_text()
        mod.evaluate("e => { delete e.dataset.lastAction; }")
        targets.nth(1).click()
        # The module marks an action done once the frame that shows its result is painted.
        page.locator(f'{TAG}[data-last-action="retarget"]').wait_for(state="attached", timeout=180_000)
        masks = salience_masks()
        assert len(masks) == 2, masks  # one request per click
        assert 0 < sum(masks[1]) < sum(masks[0]) and masks[1].index(1) > n_prompt
        assert plugin_checks.highlighted_segments(mod) > 0, "no highlighted prompt segment for the clicked span"
        after = mod.locator(".prompt .seg").evaluate_all("els => els.map(e => e.getAttribute('style') || '')")
        assert after != before, "the prompt's colours did not change for the clicked span"
        assert "whole response" not in mod.locator(".target-desc").inner_text()
        page.screenshot(path=str(artifacts_dir / "plugin-lit-models.png"))

        inside = page.locator(plugin_checks.INSIDE_TAG)
        expect(inside).to_contain_text("lit_app.plugin.make_models", timeout=30_000)
        assert not external, external[:5]
