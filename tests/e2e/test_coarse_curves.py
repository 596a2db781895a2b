"""Issue 35 point 5 (second half) in the browser at 1280x720, against the real server on the default model:
the faithfulness curves show a first, coarse result, labelled as such, before the full one, which then
replaces it. Issue 45 point 4, on the same run (once test_readable_messages.py's own run of the same curves): the
progress while the curves refine their coarse result ("Refining: Scoring edited prompts: 85 / 270", then the upper
bound's search) gives the time left from the job's measured rate on every line with units done and units to go,
and a range that holds what then happened (was: no estimate; then, for the upper bound's search, "about 1–6936 min
left" 2 s before it ended: the rows it found in the curves' memo counted as units of no time). Every progress text
is recorded as it renders; bound: 20 x the stage's true remaining time + 1 min.

A recorder in the page samples the module's result every 50 ms (its class, points, random orders and
label), so the order of what the user saw is read back after the run, whatever the machine's speed.
The time to the first result is printed, never asserted (docs/benchmarks.md has the figures).
Screenshots go to artifacts/e2e/coarse_curves/.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

SALIENCE, TAG = plugin_checks.SALIENCE_TAG, plugin_checks.EXPLAIN_TAG
SIZE = {"width": 1280, "height": 720}
TIMEOUT_MS = 300_000


def test_curves_show_a_coarse_result_first_then_the_full_one_replaces_it(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, _ = browser_page
    out = artifacts_dir / "coarse_curves"
    out.mkdir(exist_ok=True)
    page.set_viewport_size(SIZE)
    plugin_checks.open_lit(page, server_url)
    plugin_checks.select_example(page, plugin_checks.EXAMPLE_PROMPT)
    page.locator(f"{SALIENCE}[data-state=ready]").wait_for(state="attached", timeout=TIMEOUT_MS)
    page.locator(".tab", has_text="Test this explanation").first.click()
    mod = page.locator(TAG)
    expect(mod.locator(".for")).to_contain_text("target: whole response (", timeout=60_000)
    assert mod.locator("input.steps").input_value() == "10"  # the full run: 10 points, 10 random orders

    page.evaluate(plugin_checks.CURVES_RECORDER_JS, TAG)
    plugin_checks.record_texts(mod, ".progress-text", "__ssProgress")
    mod.locator("button.run.curves").click()
    # Whichever comes first: the coarse result (its screenshot) or the full one.
    mod.locator(".curves.preliminary, .curves svg.chart.deletion path.line.upper-bound").first.wait_for(
        timeout=TIMEOUT_MS)
    if mod.locator(".curves.preliminary").count():
        page.mouse.move(5, 5)
        page.screenshot(path=str(out / "coarse.png"))
    # The full result: the upper bound's curve is drawn (the coarse pass has none).
    mod.locator(".curves svg.chart.deletion path.line.upper-bound").wait_for(timeout=TIMEOUT_MS)
    page.mouse.move(5, 5)
    page.screenshot(path=str(out / "full.png"))
    seen = page.evaluate(plugin_checks.CURVES_READ_JS)
    print("what the module showed:", seen)

    assert seen, "no curves result was shown"
    first, last = seen[0], seen[-1]
    assert first["preliminary"], f"the first result shown was not the coarse one: {first}"
    assert first["upper"] == 0 and int(first["random"]) == 3 and 1 <= int(first["steps"]) <= 4, first
    k = int(first["steps"])
    assert re.fullmatch(rf"Coarse: {k} steps?, 3 random orders, no upper bound — refining to 10 steps, 10 random "
                        r"orders and the upper bound…", first["label"]), first["label"]
    assert not last["preliminary"] and last["label"] == "" and int(last["random"]) == 10 and last["upper"] == 2, last  # one bound per chart (deletion, insertion)
    # Once replaced, the coarse result never comes back.
    at = next(i for i, e in enumerate(seen) if not e["preliminary"])
    assert all(not e["preliminary"] for e in seen[at:]), seen
    expect(mod.locator(".preliminary-label")).to_have_count(0)
    print(f"first (coarse) result after {first['t']:.1f} s, full result after {seen[at]['t']:.1f} s")

    # The refining lines' time left (the same run; moved here from test_readable_messages.py, which ran these
    # curves a second time for them).
    texts = page.evaluate("window.__ssProgress")
    print("progress lines:", texts)
    line = re.compile(r"^(?P<stage>.+): (?P<done>\d+) / (?P<total>\d+) \(\d+%\)(?: · (?P<left>.+?))? \((?P<at>\d+) s\)$")
    parsed = [(t, line.match(t)) for t in texts]
    lines = [(t, m) for t, m in parsed if m and 0 < int(m["done"]) < int(m["total"])]
    assert any(t.startswith("Refining:") for t, _ in lines), f"no refining line with units done and to go: {texts}"
    ends = {m["stage"]: int(m["at"]) for _, m in parsed if m}  # the last second each stage was on screen
    for t, m in lines:
        found = re.fullmatch(r"about (\d+)(?:–(\d+))? (s|min) left", m["left"] or "")
        assert found, f"a progress line without a time left: {t!r}"
        high = int(found[2] or found[1]) * (60 if found[3] == "min" else 1)
        true_left = ends[m["stage"]] + 1 - int(m["at"])
        assert high <= 20 * true_left + 60, f"{t!r}: the stage ended {true_left} s later"
