"""The "Inside the model" module in LIT's UI, in Chromium against the real server on the default model.

Flow: select an example; the salience module shows the response; click the
response token " Paris"; the inside module traces it: its last layer's top
prediction is the model's actual next token (the greedy response token, so
rank 1st); switch the largest sub-update of the last layer off, run, and see
the probability change — first, while the run is still going (the probabilities
come before the regenerated text, which streams, and before the salience); run
again with the value switched on (a 64-token regeneration) and cancel it while the text
streams: the server's own answer to the run says it was cancelled; search a word and get value vectors (the index builds
in the background; the search answers from the layers built so far and the
module polls). Screenshots: artifacts/e2e/inside.png after the run (docs/inside.png too
when UPDATE_SCREENSHOTS=1) and inside-search.png.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

SALIENCE = "prompt-salience-module"
INSIDE = "inside-model-module"
EXAMPLE_PROMPT = "What is the capital of France?"
LOAD_TIMEOUT_MS = 420_000  # generous: the suite shares 2 cores with the salience work queued before a trace


def _visible_token(text: str) -> str:
    """The module's display form of a token (logic.ts showToken)."""
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


# Samples the module's comparison (row -> "after" text) and run state into window.__ivSamples.
SAMPLE_JS = """(el) => {
  window.__ivSamples = [];
  const sample = () => {
    const c = el.shadowRoot.querySelector('.compare');
    const rows = c ? [...c.querySelectorAll('tbody tr')].map((r) => [r.dataset.row, r.querySelector('td.after').textContent]) : [];
    const s = JSON.stringify({run: el.dataset.run, rows});
    const all = window.__ivSamples;
    if (all[all.length - 1] !== s) all.push(s);
  };
  window.__ivTimer = setInterval(sample, 50);
}"""


def test_trace_intervene_search(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    clock = [time.perf_counter()]

    def lap(name: str) -> None:  # printed, never asserted
        now = time.perf_counter()
        print(f"\n{name}: {now - clock[0]:.1f} s")
        clock[0] = now

    page.goto(server_url)
    inside = page.locator(INSIDE)
    inside.wait_for(state="attached", timeout=120_000)
    # A tab beside the salience module (lit_app/serving/layouts.py); LIT renders it while its tab is open.
    page.locator(".tab", has_text="Inside the model").first.click()
    expect(inside).to_contain_text("Select a prompt")
    page.locator(".tab", has_text="Sequence Salience").first.click()

    # 1. Select an example; the salience module generates and explains the response.
    page.locator("data-table-module tbody tr", has_text=EXAMPLE_PROMPT).first.click()
    page.locator(f"{SALIENCE}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    sal = page.locator(SALIENCE)
    lap("select -> salience ready")

    # 2. Click " Paris" in the response: the inside module follows and traces it.
    targets = sal.locator(".response .tgt")
    paris = targets.filter(has_text=re.compile(r"Paris"))
    assert paris.count() >= 1, f"no 'Paris' in the response: {sal.locator('.response').inner_text()!r}"
    paris.first.click()
    page.locator(".tab", has_text="Inside the model").first.click()  # a tab beside the salience module
    expect(inside.locator(".target-token")).to_contain_text("Paris", timeout=LOAD_TIMEOUT_MS)
    page.locator(f"{INSIDE}[data-state=ready]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    lap("click -> trace ready")
    rows = inside.locator("tr.layer-row")
    assert rows.count() == 30  # SmolLM2-135M has 30 layers
    # The response is the model's greedy output, so the actual next token is the clicked one:
    # the model's own top prediction, and the last layer's logit lens agrees with it.
    expected = _visible_token(" Paris")
    expect(inside.locator(".final-top")).to_have_text(expected)
    expect(inside.locator(".final-rank")).to_have_text("1st")
    last = rows.nth(29)
    assert last.locator(".preds .tok").first.inner_text() == expected
    assert last.locator(".rank b").inner_text() == "1st"
    p_before = last.locator(".pval").inner_text()

    # Expand the last layer: top-10 before/after the FFN and ten sub-updates with their tokens.
    last.click()
    details = inside.locator("tr.details[data-layer='29']")
    expect(details.locator(".sub-update")).to_have_count(10)

    # 3. Switch the last layer's largest sub-update off and run.
    chip = last.locator(".sub-update").first
    layer, index = chip.get_attribute("data-layer"), chip.get_attribute("data-index")
    chip.click()
    item = inside.locator(f".iv-item[data-key='{layer}:{index}']")
    expect(item).to_be_visible()
    expect(item.locator(".iv-mode")).to_have_text("off")
    # What the comparison shows, sampled every 50 ms in the page while the run goes on.
    inside.element_handle().evaluate(SAMPLE_JS)
    inside.locator("button.run").click()
    page.locator(f"{INSIDE}[data-run=done]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    lap("run -> before/after ready")
    samples = page.evaluate("() => { clearInterval(window.__ivTimer); return window.__ivSamples; }")
    print("what the comparison showed:", *samples, sep="\n  ")
    first = next(json.loads(x) for x in samples if json.loads(x)["rows"])
    rows_first = dict(first["rows"])
    assert first["run"] == "running", f"nothing was shown before the run ended: {samples}"
    assert "p" in rows_first and "most" not in rows_first, f"the probabilities did not come first: {first}"
    assert "generated" not in rows_first or rows_first["generated"].endswith("…"), first  # still streaming
    compare = inside.locator(".compare")
    prob_row = compare.locator("tbody tr").first
    before, after = prob_row.locator("td.before").inner_text(), prob_row.locator("td.after").inner_text()
    print(f"\np(Paris) before {before}, with L{layer} v{index} off {after}")
    assert before == p_before
    assert after != before and re.search(r"\([+−]", after), "switching the sub-update off did not change p"
    expect(last.locator(".ival")).to_be_visible()  # the layer table shows the new probabilities too
    expect(compare).to_contain_text("generated")
    # The picture: a tall window, the last layers, the intervention list and before/after.
    page.set_viewport_size({"width": 1440, "height": 1500})
    inside.locator(".interventions").scroll_into_view_if_needed()
    page.mouse.move(5, 5)
    page.screenshot(path=str(artifacts_dir / "inside.png"))
    plugin_checks.doc_picture(artifacts_dir / "inside.png", "inside.png")
    page.set_viewport_size({"width": 1440, "height": 960})

    # 3b. Switch the same value "on" (its layer's largest |m|·‖v‖), run again and cancel once the
    # probabilities are in and the new text streams: the run stops on the server. With the value on, the
    # greedy regeneration runs to the 64-token limit (the model is deterministic; in process it takes
    # ~2.4 s on 2 cores, against ~0.35 s for the 6-token text with the value off), so Cancel arrives
    # while tokens are still being generated, not in a race with a run about to finish.
    item.locator(".iv-mode").click()
    expect(item.locator(".iv-mode")).to_have_text("on")

    def is_run(response) -> bool:
        post = response.request.post_data or ""
        return "_inside_intervene" in response.url and '"inside_action":"run"' in post.replace(" ", "")

    with page.expect_response(is_run, timeout=LOAD_TIMEOUT_MS) as run_response:
        inside.locator("button.run").click()
        inside.locator(".run-step.done[data-step=trace]").wait_for(timeout=LOAD_TIMEOUT_MS)
        expect(compare.locator("tr[data-row=generated] td.after")).to_contain_text("…", timeout=LOAD_TIMEOUT_MS)
        inside.locator("button.cancel").click()
    page.locator(f"{INSIDE}[data-run=cancelled]").wait_for(state="attached", timeout=60_000)
    expect(inside.locator(".run-notice")).to_have_text("Cancelled.")
    expect(compare.locator("tr[data-row=p]")).to_be_visible()  # what arrived stays
    expect(compare.locator("tr[data-row=most]")).to_have_count(0)
    answer = run_response.value.json()[0]["inside_intervention"]
    assert answer.get("cancelled") is True, f"the server finished the run instead: {sorted(answer)}"
    cut = answer["partial"]["after"].get("generation", {}).get("text", "")
    print(f"regenerated text when the cancel arrived: {cut!r}")
    item.locator(".iv-mode").click()  # on -> on_layer_max -> off again, as in the first run
    item.locator(".iv-mode").click()
    expect(item.locator(".iv-mode")).to_have_text("off")
    lap("run -> cancel -> the server's run answers cancelled")

    # 4. Search a word; the index builds in the background, the module polls until hits arrive.
    box = inside.locator(".search-input")
    box.fill("the")
    box.press("Enter")
    expect(inside.locator(".search-status")).to_be_visible(timeout=60_000)
    inside.locator(".search-hit").first.wait_for(timeout=LOAD_TIMEOUT_MS)
    lap("search -> first hits")
    status = inside.locator(".search-status").inner_text()
    print(f"search status: {status}")
    hit = inside.locator(".search-hit").first
    assert re.fullmatch(r"L\d+·v\d+", hit.locator(".hit-add").inner_text())
    hit.locator(".hit-add").click()
    expect(inside.locator(".iv-item")).to_have_count(2)
    # Ranked by the projection score (E v)[token] over every value: no index, no polling.
    inside.locator("select.search-ranking").select_option("projection")
    expect(inside.locator(".search-status")).to_contain_text("projection score", timeout=LOAD_TIMEOUT_MS)
    expect(inside.locator(".search-hit .score").first).to_be_visible()
    scores = [float(x) for x in inside.locator(".search-hit .score").all_inner_texts()]
    assert scores == sorted(scores, reverse=True) and len(scores) > 1, scores
    # The new intervention: LM-Debugger's "on", at this position only, then run: the payload is resolved.
    new_item = inside.locator(".iv-item").nth(1)
    new_item.locator(".iv-mode").click()
    expect(new_item.locator(".iv-mode")).to_have_text("on")
    new_item.locator("select.iv-scope").select_option("position")
    with page.expect_response(is_run, timeout=LOAD_TIMEOUT_MS) as run_response:
        inside.locator("button.run").click()
    page.locator(f"{INSIDE}[data-run=done]").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    ivs = run_response.value.json()[0]["inside_intervention"]["interventions"]
    on = [iv for iv in ivs if iv["mode"] == "on"]
    assert len(on) == 1 and on[0]["scope"] == "position" and on[0]["value"] > 0.01, ivs
    expect(compare.locator(".sub-title")).to_contain_text("@pos")

    page.screenshot(path=str(artifacts_dir / "inside-search.png"))
    assert not external, f"the page contacted other hosts: {external[:5]}"
