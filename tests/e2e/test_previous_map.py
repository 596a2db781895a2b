"""Issue 45 §3 in the browser at 1280x720, against the real server on the default model: while a segment method the
user chose measures (its job's progress on the status line), the prompt keeps the last map's colours, marked as the
previous one with the registry's labels ("Previous map (Gradient norm) — measuring Ablation surrogate (ContextCite)…"),
instead of losing them; the new map replaces it when it arrives. (Before: the prompt went uncoloured while it measured.)
At word granularity (measured on request, with no automatic switch to leave one out) the surrogate is measured by no
other browser test, so the session server's cache does not answer it at once."""

from __future__ import annotations

import re

import pytest

from sequence_salience.methods import ablation_surrogate, grad_norm, integrated_gradients, smooth_grad
from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

TAG = plugin_checks.SALIENCE_TAG
LOAD_TIMEOUT_MS = plugin_checks.LOAD_TIMEOUT_MS
COLOURED = '.prompt .seg[style*="background"]'


def _prompt_styles(mod) -> list[str]:
    return mod.locator(".prompt .seg").evaluate_all("els => els.map(e => e.getAttribute('style') || '')")


def _few_shot_gradient(page, url: str):
    """Opens LIT at 1280x720 on the few-shot row (word granularity) and waits for the gradient's colours; returns the
    module, its method select and the gradient's styles of the prompt's segments."""
    from playwright.sync_api import expect

    mod = plugin_checks.open_lit(page, url, plugin_checks.SMALL_SCREEN)
    expect(mod.locator("select.granularity")).to_have_value("word")
    page.locator("data-table-module tbody tr", has_text="few-shot classification").first.click()
    page.locator(f"{TAG}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    method = mod.locator("select.method")
    expect(method).to_have_value(grad_norm.NAME)
    mod.locator(COLOURED).first.wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    # The map to compare with once the per-token matrices are in (they can change a colour's last digit).
    expect(mod.locator(".precision")).to_contain_text("per-token detail ready", timeout=LOAD_TIMEOUT_MS)
    return mod, method, _prompt_styles(mod)


def test_segment_method_wait_keeps_the_previous_map(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    mod, method, gradient = _few_shot_gradient(page, server_url)

    # The user chooses the surrogate: while its job runs, the gradient's colours stay, marked as the previous map.
    method.select_option(ablation_surrogate.NAME)
    mod.locator(f'.segment-status[data-method="{ablation_surrogate.NAME}"] button.measure').click()
    measuring = mod.locator(f'.segment-status[data-method="{ablation_surrogate.NAME}"] .measuring')
    expect(measuring).to_be_visible()
    label = mod.locator(".previous-map")
    expect(label).to_have_text(f"Previous map ({grad_norm.METHOD.label}) — measuring {ablation_surrogate.METHOD.label}…")
    expect(label).to_have_attribute("data-method", grad_norm.NAME)
    expect(mod.locator(".text.prompt.previous")).to_have_count(1)
    assert _prompt_styles(mod) == gradient, "the previous map is not the gradient's colours"
    assert mod.locator(COLOURED).count() > 0
    expect(measuring).to_be_visible()  # still measuring after the checks: they saw the wait, not its end
    page.mouse.move(5, 5)
    page.screenshot(path=str(artifacts_dir / "previous-map-while-measuring.png"))

    # The new map replaces it when it arrives.
    expect(measuring).to_have_count(0, timeout=LOAD_TIMEOUT_MS)
    expect(label).to_have_count(0)
    expect(mod.locator(".text.prompt.previous")).to_have_count(0)
    expect(mod.locator(".precision")).to_contain_text("measured per word")
    # True to what runs (issue 45 §4): the surrogate's cost is its random ablations; nothing says it removes each segment.
    expect(mod.locator(".precision")).to_contain_text(ablation_surrogate.METHOD.cost_unit)
    assert not re.search(r"removing (each|it)\b", mod.inner_text()), mod.inner_text()
    assert mod.locator(COLOURED).count() > 0
    assert _prompt_styles(mod) != gradient, "the surrogate's map looks like the gradient's"
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()
    assert not external, f"requests to non-local hosts: {external}"


def test_ig_and_smoothgrad_waits_keep_the_previous_map(server_url, browser_page, artifacts_dir):
    """The same for the token methods computed on request: while integrated gradients' span (a batch of steps) and
    then SmoothGrad's (a batch of samples) compute, the prompt keeps the last map shown, marked "Previous map (…) —
    computing …" (before: uncoloured, "pending"). IG at a step count no other test runs on this row."""
    from playwright.sync_api import expect

    page, external = browser_page
    mod, method, gradient = _few_shot_gradient(page, server_url)
    label = mod.locator(".previous-map")

    method.select_option(integrated_gradients.NAME)
    steps = mod.locator("input.ig-steps")
    steps.fill(str(plugin_checks.IG_STEPS_OF_ITS_OWN["previous_map"]))
    steps.dispatch_event("change")
    expect(label).to_have_text(f"Previous map ({grad_norm.METHOD.label}) — computing {integrated_gradients.METHOD.label}…")
    expect(label).to_have_attribute("data-method", grad_norm.NAME)
    expect(mod.locator(".text.prompt.previous")).to_have_count(1)
    assert _prompt_styles(mod) == gradient, "the previous map is not the gradient's colours"
    expect(mod.locator(".precision")).to_contain_text("computing")  # still computing after the checks
    page.mouse.move(5, 5)
    page.screenshot(path=str(artifacts_dir / "previous-map-while-ig-computes.png"))
    expect(label).to_have_count(0, timeout=LOAD_TIMEOUT_MS)  # IG's values replace it (shown, or hidden by the check)
    expect(mod.locator(".text.prompt.previous")).to_have_count(0)
    # The map on screen now: IG's, unless its completeness check hides it (then the gradient's stays the last shown).
    shown = grad_norm if mod.locator('.completeness-rejected[data-shown="no"]').count() else integrated_gradients
    before = _prompt_styles(mod) if shown is integrated_gradients else gradient

    method.select_option(smooth_grad.NAME)
    samples = mod.locator("input.sg-samples")
    # Long enough to watch (the default count's request, just started, is superseded): each sample is a forward and
    # backward of its own, ~1 s of a worker's CPU under `make test`, and the checks below take well under one; 24
    # (and IG's 24 steps) cost ~30 s more of CPU and watched nothing more (docs/benchmarks.md, "Session 37 (h5)").
    samples.fill("12")
    samples.dispatch_event("change")
    expect(label).to_have_text(f"Previous map ({shown.METHOD.label}) — computing {smooth_grad.METHOD.label}…")
    assert _prompt_styles(mod) == before, "the previous map is not the last map's colours"
    expect(mod.locator(".precision")).to_contain_text("computing")
    expect(label).to_have_count(0, timeout=LOAD_TIMEOUT_MS)
    assert mod.locator(COLOURED).count() > 0
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()
    assert not external, f"requests to non-local hosts: {external}"
