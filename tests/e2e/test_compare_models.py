"""Two models side by side in LIT's UI (`--models a:default,b:<folder>`), in Debian Chromium.

Model b is a tiny random Llama over the default model's tokenizer (tests/unit/tiny_models.py; the server:
`two_model_server`, tests/e2e/conftest.py).

`test_each_module_once_per_model_and_named` (1280×720): with both models selected, LIT shows each of our
modules once per model, as the README says, each naming its model in its header line; each salience module
explains its own model's answer, and each Inside module follows the target of its own model's salience module
(a click in b's response retraces b's Inside only).

`test_compare_models_follows_the_selected_method` (1280×720): Compare models shows the method of the salience
module's Method selector: gradient norm (the default; unsigned values), then SmoothGrad with the sample count
typed in the module, asked of both models' compare wrappers (the request bodies carry the count); the method's name
opens the help at its two lines.

`test_switch_to_two_models_and_compare_them`: LIT opens with model a; the salience module explains a's answer
and shows no "Compare models" section (one model). Click b in LIT's model selector (the toolbar's model
buttons): both selected, LIT shows the salience module once per model and the section appears inside a's;
its "Compare models" toggle (mouse) opens it: both responses,
diff-marked, each equal to that model's own greedy answer (asked from the server directly), both maps on
one shared scale (the legend's end is the largest |value| of either side), the difference and each
answer's log p under both models; sentence granularity in the module gives fewer, longer aligned
segments there. The toggle closes and opens again from the keyboard (Enter, Space). Click a off: the
section is gone and the salience module explains b's answer.

The stacked views at 1280×720 (issue 45 §5; the prompt box's lines a reader sees, `visible_lines`, and the legends'
maxima, as in test_stacked_views.py, which has the one-model ones; here since session 40, so that a worker starts
`two_model_server` once for both):

`test_two_models_keep_each_prompt_readable`: two models selected (LIT stacks one salience module per model, 243 px
each); each module's prompt shows at least MIN_LINES lines without scrolling (was two for model a).

`test_compare_models_keeps_the_map_and_bs_own_scale`: Compare models open in model a's module: a's map shows at
least MIN_LINES lines of its prompt without scrolling the module (the section opens beside the map and scrolls on its
own; was: above it, the module scrolled to reach the map); b's own module keeps b's scale (its legend ends at its
largest prompt value, its top list's first, not at the shared scale) and its legend says so and where both share one
(was: nothing said); then with the intensity at 2 the section's shared legend ends where a's map's legend does, which
says the scale is the comparison's beside it. (Two tests that opened the same view until session 38.)
"""

from __future__ import annotations

import json
import re
import time

import pytest

from lit_app.schema import fields
from lit_app.wrappers.inside import INSIDE_T
from tests.e2e.plugin_checks import (FEW_SHOT, MIN_LINES, doc_picture, help_opens_at, legend_max, model_button,
                                     open_both_models, open_compare_models, open_tab, visible_lines)
from tests.server_process import REPO

pytestmark = pytest.mark.e2e

SALIENCE = "prompt-salience-module"
INSIDE = "inside-model-module"
EXPLAIN = "explain-test-module"
PROMPT = "What is the capital of France?"
TIMEOUT_MS = 300_000
README = REPO / "README.md"


def greedy_answers(server) -> dict[str, str]:
    """Each model's response to PROMPT, asked of the server directly (not through the page)."""
    want = {}
    for m in ("a", "b"):
        status, _, body = server.post_json(f"/get_preds?model={m}",
                                           {"inputs": [{"id": "x", "data": {fields.PROMPT: PROMPT}}]})
        assert status == 200, body
        want[m] = json.loads(body)[0][fields.RESPONSE]
    assert want["a"].strip() != want["b"].strip()
    return want


def record_preds(page) -> list[tuple[str, dict]]:
    """(model, first input's data, {} when sent by id) of every /get_preds request the page sends, in order."""
    sent: list[tuple[str, dict]] = []

    def on_request(request) -> None:
        if "/get_preds" in request.url and request.post_data:
            model = re.search(r"[?&]model=([^&]+)", request.url).group(1)
            first = (json.loads(request.post_data).get("inputs") or [{}])[0]
            # LIT sends a datapoint of the dataset by its id alone (a string); derived inputs in full.
            sent.append((model, first.get("data", {}) if isinstance(first, dict) else {}))

    page.on("request", on_request)
    return sent


def test_each_module_once_per_model_and_named(two_model_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    # The README's claim, checked below as written.
    claim = "LIT shows each of our modules once per selected model"
    assert claim in " ".join(README.read_text().split()), f"the README no longer says {claim!r}: update this test"
    server = two_model_server
    page, external = browser_page
    want = greedy_answers(server)
    sent = record_preds(page)
    sal_a, sal_b = open_both_models(page, server.url)

    # Sequence Salience: one per model, each named in its header line and explaining its own model's answer.
    assert page.locator(SALIENCE).count() == 2
    for m, mod in (("a", sal_a), ("b", sal_b)):
        expect(mod.locator(".controls .model-name")).to_have_text(f"model: {m}")
        assert mod.locator(".body .response").inner_text().strip() == want[m].strip()
    page.screenshot(path=str(artifacts_dir / "two-models-salience.png"))

    # A click on b's second response word makes it b's target; a's stays the whole response.
    sal_b.locator('.response .tgt[data-ti="1"]').click()
    expect(sal_b.locator(".target-desc")).not_to_contain_text("whole response")
    assert "whole response" in sal_a.locator(".target-desc").inner_text()

    # Inside the model: one per model, named; each traces its own model's target (a: the first answer token of
    # the whole response, b: the clicked word, never token 0), with its own model's trace companion.
    open_tab(page, "Inside the model")
    assert page.locator(INSIDE).count() == 2
    for m in ("a", "b"):
        inside = page.locator(f'{INSIDE}[model="{m}"]')
        expect(inside.locator(".model-name").first).to_have_text(f"model: {m}")
        page.locator(f'{INSIDE}[model="{m}"][data-state=ready]').wait_for(state="attached", timeout=TIMEOUT_MS)
    traced = {model: data[INSIDE_T] for model, data in sent if model.endswith("_inside_trace")}
    assert set(traced) == {"_a_inside_trace", "_b_inside_trace"}, traced
    assert traced["_a_inside_trace"] == 0 and traced["_b_inside_trace"] > 0, traced
    page.screenshot(path=str(artifacts_dir / "two-models-inside.png"))

    # Test this explanation: one per model, named, each following its model's target.
    open_tab(page, "Test this explanation")
    assert page.locator(EXPLAIN).count() == 2
    for m in ("a", "b"):
        explain = page.locator(f'{EXPLAIN}[model="{m}"]')
        expect(explain.locator(".tabs .model-name")).to_have_text(f"model: {m}")
        assert explain.locator(".empty").count() == 0  # it has its model's target
    page.screenshot(path=str(artifacts_dir / "two-models-explain.png"))
    assert not external, external


def test_compare_models_follows_the_selected_method(two_model_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    server = two_model_server
    page, external = browser_page
    sent = record_preds(page)
    sal_a, _ = open_both_models(page, server.url)
    method = sal_a.locator("select.method")

    # The default method (gradient norm): both maps show it, so every value is >= 0 (unsigned).
    assert method.input_value() == "grad_norm"
    mod = open_compare_models(page, sal_a)
    expect(mod.locator(".models-head .method")).to_have_text("Gradient norm")
    titles = mod.locator(".view-both .cseg:not(.markup)").evaluate_all("els => els.map(e => e.title)")
    values = [float(part.split(" ")[1]) for t in titles for part in t.split(" · ")[:2] if part.split(" ")[1] != "–"]
    assert len(values) >= 5 and min(values) >= 0, values

    # SmoothGrad with 4 samples in the salience module: Compare models asks both models for it with that count.
    method.select_option("smooth_grad")
    count = sal_a.locator("input.sg-samples")
    count.fill("4")
    count.dispatch_event("change")
    expect(mod.locator(".models-head .method")).to_have_text("SmoothGrad (× input) (4 samples)", timeout=TIMEOUT_MS)
    page.locator(f'{SALIENCE}[model="a"][data-compare-models="done"]').wait_for(state="attached", timeout=TIMEOUT_MS)
    label = sal_a.locator("select.method option:checked").get_attribute("title")  # the label (its text: the menu's)
    assert mod.locator(".models-head .method").inner_text().startswith(label)
    # Its name opens the help at SmoothGrad's two lines (issue 45 §2: linked from every method's name).
    help_opens_at(page, mod.locator('.models-head .method-name[data-where="compare-models"]'), "smooth_grad")
    # Compare models asks each model's compare wrapper for the whole response's salience (with_pinned_salience):
    # the last such requests carry the module's method count, for both models, as Compare models' view (the server
    # supersedes a page's comparisons per view: lit_app/wrappers/compare.py).
    asked = {model: (data.get("smooth_grad_samples"), data.get("ig_steps"), data.get(fields.COMPARE_VIEW))
             for model, data in sent if model in ("_a_compare", "_b_compare") and data.get("with_pinned_salience") is True}
    models = fields.COMPARE_VIEW_MODELS
    assert asked == {"_a_compare": (4, 0, models), "_b_compare": (4, 0, models)}, asked
    # b's salience module keeps its own method.
    assert page.locator(f'{SALIENCE}[model="b"] select.method').input_value() == "grad_norm"
    page.screenshot(path=str(artifacts_dir / "compare-models-method.png"))
    assert not external, external


def test_switch_to_two_models_and_compare_them(two_model_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    server = two_model_server
    page, external = browser_page
    want = greedy_answers(server)

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

    # LIT's model selector: add b. The salience module shows once per model; the section appears in a's, closed
    # (nothing asked yet); the toggle opens it.
    model_button(page, "b").click()
    expect(page.locator(SALIENCE)).to_have_count(2, timeout=60_000)
    salience = page.locator(f'{SALIENCE}[model="a"]')
    mod = salience.locator(".compare-models")
    assert page.locator(".compare-models").count() <= 1  # never in b's module
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
    # The label changes before the sentences' values arrive (the section asks both models again; at load 17 the view
    # was still empty when counted, session 38, and the words' segments can still be there when the label changes,
    # then the view is empty while it asks: session 40): wait until the view holds fewer segments than words.
    cells = mod.locator(".view-both .cseg:not(.markup)")
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not 0 < (n_sentences := cells.count()) < n_words:
        assert time.monotonic() < deadline, f"{n_sentences} segments at sentence granularity ({n_words} words)"
        page.wait_for_timeout(200)

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
    model_button(page, "a").click()
    expect(page.locator(".compare-models")).to_have_count(0, timeout=60_000)
    expect(page.locator(SALIENCE)).to_have_count(1)
    salience = page.locator(SALIENCE)
    expect(salience.locator(".controls .model-name")).to_have_text("model: b")
    expect(salience.locator(".body .response")).to_have_text(
        re.compile(r"\s*" + re.escape(want["b"].strip()) + r"\s*"), timeout=TIMEOUT_MS)
    assert not external, external


def test_two_models_keep_each_prompt_readable(two_model_server, browser_page, artifacts_dir):
    page, external = browser_page
    sal_a, sal_b = open_both_models(page, two_model_server.url, FEW_SHOT)
    page.mouse.move(5, 5)
    for m, mod in (("a", sal_a), ("b", sal_b)):
        assert mod.evaluate("m => m.shadowRoot.querySelector('.module').scrollTop") == 0
        lines = visible_lines(mod)
        assert lines >= MIN_LINES, f"model {m}'s prompt shows {lines} lines at 1280x720"
    page.screenshot(path=str(artifacts_dir / "stacked-two-models.png"))
    assert not external, external


def test_compare_models_keeps_the_map_and_bs_own_scale(two_model_server, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    sal_a, sal_b = open_both_models(page, two_model_server.url, FEW_SHOT)
    section = open_compare_models(page, sal_a)
    prompt = sal_a.locator(".body .text.prompt")
    # The map keeps its prompt box; the section above scrolls on its own, its head (the toggle) on screen.
    lines = prompt.evaluate("e => Math.floor((e.clientHeight - 12) / parseFloat(getComputedStyle(e).lineHeight))")
    assert lines >= MIN_LINES, f"a's prompt box holds {lines} lines under Compare models"
    assert section.evaluate("e => e.scrollHeight > e.clientHeight")
    expect(section.locator("button.toggle")).to_be_in_viewport()
    # Without scrolling a's module, its map shows the prompt, the section beside it (to its right, side by side).
    page.mouse.move(5, 5)
    assert sal_a.evaluate("m => m.shadowRoot.querySelector('.module').scrollTop") == 0
    lines = visible_lines(sal_a)
    assert lines >= MIN_LINES, f"a's prompt shows {lines} lines under Compare models without scrolling"
    box, side = prompt.bounding_box(), section.bounding_box()
    assert side["x"] >= box["x"] + box["width"] and side["y"] < box["y"] + box["height"], (box, side)
    page.screenshot(path=str(artifacts_dir / "stacked-compare-models.png"))
    doc_picture(artifacts_dir / "stacked-compare-models.png", "stacked.png")

    # b's own module keeps b's scale while a's module shows a and b on one scale.
    assert sal_a.locator("select.method").input_value() == \
        sal_b.locator("select.method").input_value()  # one method on one prompt in both modules
    shared = legend_max(section.locator(".legend-shared"))
    own = legend_max(sal_b.locator(".side .legend"))
    # b's scale is b's: its legend ends at its largest prompt value (its top list's first, in the legend's digits).
    top = float(sal_b.locator(".side .top-item").first.get_attribute("data-value"))
    assert own == pytest.approx(abs(top), rel=1e-3), (own, top)
    assert own != shared, (own, shared)  # the tiny random b and the default model differ (0.29 vs 3.6 at writing)
    expect(sal_b.locator(".side .legend-title")).to_contain_text(
        "scale of b alone; Compare models (in a's module) puts a and b on one scale")
    sal_b.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir / "stacked-own-scale.png"))

    # One scale: at intensity 2, the section's shared legend ends where a's map's legend does (the section showed
    # its values at intensity 1 whatever the module's).
    sal_a.locator("input.intensity").fill("2")
    expect(sal_a.locator(".side .legend-title")).to_contain_text("one scale with the comparison beside")
    shared, own = legend_max(section.locator(".legend-shared")), legend_max(sal_a.locator(".side .legend"))
    assert shared == own, (shared, own)
    assert not external, external
