"""The word button in the Sequence Salience module, in a real browser against the real server (issue 42: "at word
granularity, coarse-to-fine leave one word out replaces the 90-forward button"; "word granularity shows the
coarse-to-fine progress"). At word granularity with leave one segment out chosen, the measure button runs the
server's request default at word, word_verified (an estimate of every word, then the best quarter measured by
leaving each out), named by its record and priced by its budget; the status shows its stages in order (the estimate
of every word, nothing measured, then the words measured after each batch, then the result) while the words not
measured stay hatched with the estimate's value; its forwards are at most a quarter of the prompt's words, counted
here from the prompt; and every measured value equals leave one word out computed here by one plain forward per
measured word (tests/unit/test_ablation.py `brute_force`, no cache). A short shipped row (the few-shot case: a
one-token target, so that the page's per-token matrices cost one pass) keeps it cheap.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import sequence_salience as ss
from lit_app.data.datasets import CASE_STUDIES_PATH
from lit_app.schema import fields, method_registry
from sequence_salience import scoring
from sequence_salience.salience import pair_tokens
from sequence_salience.methods import attention_attribution, get_segment_method, leave_one_out, word_verified
from tests.e2e import plugin_checks
from tests.unit.test_ablation import brute_force

pytestmark = pytest.mark.e2e

ROW = "few-shot classification"  # 84 words: the button measures 21 (docs/benchmarks.md "Session 39 (h1)")
TIMEOUT_MS = 300_000

# Every state of the status line as it renders, one string: "look:<method>|<its words>" while values so far are on
# screen (`.first-stage`: the estimate's method while nothing is measured, then the button's method), with
# " @<stage>" once the job names its batch ("batch 1 of 2"), or "done:<words measured exactly>" (`.refined`).
_RECORD_STAGES_JS = """(e) => {
  const seen = window.__ssWordStages = [];
  const read = () => {
    const r = e.shadowRoot;
    const look = r.querySelector('.segment-status .first-stage');
    const batch = (r.querySelector('.segment-status .measuring')?.textContent ?? '').match(/batch \\d of \\d/);
    const done = r.querySelector('.segment-status .refined');
    let now = '';
    if (look) now = 'look:' + look.dataset.method + '|' + look.textContent.replace(/\\s+/g, ' ').trim() + (batch ? ' @' + batch[0] : '');
    else if (done) now = 'done:' + done.textContent.replace(/\\s+/g, ' ').trim();
    if (now && seen[seen.length - 1] !== now) seen.push(now);
  };
  new MutationObserver(read).observe(e.shadowRoot, {subtree: true, childList: true, characterData: true,
                                                    attributes: true});
}"""


def _row() -> dict:
    with open(CASE_STUDIES_PATH, encoding="utf-8") as f:
        return next(r for r in map(json.loads, filter(str.strip, f)) if r["case"].startswith(ROW))


@pytest.fixture(scope="module")
def row_words():
    """(the row, the model, its chat prompt, the prompt's words as the library segments them)."""
    row = _row()
    lm = ss.load_model("default")
    chat = lm.format_prompt(row["prompt"], system=row.get("system") or None)
    return row, lm, chat, scoring.prompt_segments(pair_tokens(lm, chat, row["target"]), "word").matches_only()


def test_the_word_button_estimates_every_word_then_measures_the_best_quarter_exactly(
        server_url, browser_page, artifacts_dir, row_words):
    from playwright.sync_api import expect

    row, lm, chat, words = row_words
    S = len(words)
    n = word_verified.budget(S)
    assert S >= 20, S  # a quarter is at least five words: the budget is the quarter itself
    assert method_registry.REQUEST_SEGMENT_METHOD["word"] == word_verified.NAME
    page, external = browser_page
    sent: list[dict] = []  # every word_verified payload the server sent the page: values so far, then the values

    def on_response(r) -> None:
        if "/get_preds" not in r.url or r.request.method != "POST":
            return
        try:
            salience = r.json()[0]["salience"]
        except (ValueError, KeyError, IndexError, TypeError):
            return
        seg = salience.get("segments") or salience.get("partial_segments")
        if seg and seg.get("method") == word_verified.NAME:
            sent.append({"done": "segments" in salience, **seg})

    page.on("response", on_response)
    mod = plugin_checks.open_lit(page, server_url, plugin_checks.SMALL_SCREEN)
    mod.locator("select.granularity").select_option("word")
    plugin_checks.select_and_wait(page, ROW)
    mod.locator("select.method").select_option(leave_one_out.NAME)

    # Nothing is measured at word granularity until asked; the button is the registry's method, priced by its budget
    # (a quarter of the words counted here, + the unedited prompt's forward), every word one click away.
    label = get_segment_method(word_verified.NAME).label
    button = mod.locator(f'.segment-status button.measure[data-method="{word_verified.NAME}"]')
    expect(button).to_have_text(f"Measure with {label}: ~{S // 4 + 1} forwards")
    # (Or nothing to run, where leave one word out was measured on this server before: the shared server of a
    # worker's browser tests; the fresh page below checks which, by the server's answer.)
    expect(mod.locator(".segment-status button.measure-all")).to_have_text(re.compile(
        rf"Measure each word by removing it: (~{S + 1} forwards|measured already, no forward)$"))
    mod.evaluate(_RECORD_STAGES_JS)
    plugin_checks.record_texts(mod, ".segment-status", "__ssWordStatus")
    button.click()
    refined = mod.locator(".segment-status .refined")
    refined.wait_for(timeout=TIMEOUT_MS)

    # The stages in order: the estimate of every word (its own method's name, nothing measured), then, where a poll
    # saw it between the batches, the first batch's words measured, then the result: a quarter measured exactly.
    stages = page.evaluate("window.__ssWordStages")
    estimate = get_segment_method(attention_attribution.NAME).label
    first = word_verified.first_batch(n)
    looks = list(dict.fromkeys(s.split(" @")[0] for s in stages[:-1]))  # the values so far, in the order shown
    want_looks = [f"look:{attention_attribution.NAME}|{estimate}: 0 of {S} words verified so far",
                  f"look:{word_verified.NAME}|{label}: {first} of {S} words verified so far"]
    assert looks in (want_looks[:1], want_looks), stages
    batches = list(dict.fromkeys(s.split(" @")[1] for s in stages[:-1] if " @" in s))  # the job's stages, in order
    assert batches in ([], ["batch 1 of 2"], ["batch 2 of 2"], ["batch 1 of 2", "batch 2 of 2"]), stages
    assert stages[-1] == f"done:{n} of {S} words measured exactly; hatched: estimated, not measured", stages
    # The page had the estimate, hatched, before anything was measured (the answer that started the job brought it).
    assert sent and not sent[0]["done"] and not any(sent[0]["measured"]), [s["done"] for s in sent]

    # Done: the payload's forwards, the measured words and the hatched ones, as the page shows them.
    final = sent[-1]
    assert final["done"] and final["spans"] == [list(s) for s in words.spans]
    measured = np.array(final["measured"])
    assert measured.sum() == n == S // 4 and final["stats"]["rows"] - 1 == n <= 0.25 * S  # the unedited one apart
    # The button's cost, every progress line's total and the result's count are one number (the unedited prompt's
    # forward counted in each, as for leave one out: test_readable_messages.py).
    totals = {int(m.group(2)) for t in page.evaluate("window.__ssWordStatus")
              for m in re.finditer(r"(\d+) / (\d+) forwards", t)}
    assert totals <= {n + 1} and final["stats"]["rows"] == S // 4 + 1, (totals, final["stats"]["rows"])
    expect(mod.locator(".precision")).to_contain_text(
        f"measured per word by {label}: {final['stats']['rows']} forwards, {n} of {S} words exactly")
    unmeasured = mod.locator(".prompt .seg.unmeasured")
    expect(unmeasured).to_have_count(S - n)
    titles = unmeasured.evaluate_all("els => els.map(e => e.getAttribute('title') || '')")
    assert all(re.fullmatch(r"estimated, not measured \(estimate -?[0-9.e+-]+\)", t) for t in titles), titles[:5]

    # Each measured value is leave one word out: one plain forward of the prompt without that word (no cache).
    picked = [int(i) for i in np.flatnonzero(measured)]
    want, segs = brute_force(lm, chat, row["target"], "word", "filler", only=picked)
    assert segs.spans == words.spans
    np.testing.assert_allclose(np.array(final["values"])[picked], want, atol=1e-3)
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()
    page.mouse.move(5, 5)
    page.screenshot(path=str(artifacts_dir / "word-button-best-quarter.png"))
    assert not external, f"requests to non-local hosts: {external}"
    _a_fresh_page_counts_the_words_the_button_measured(page, server_url, S, n)


def _a_fresh_page_counts_the_words_the_button_measured(page, server_url: str, S: int, n: int) -> None:
    """Another page (a second tab, a reload, another user) on the same server and row, after the word button: the
    server takes the button's n exact words, so "Measure each word" states the S - n words that run + the unedited
    prompt (was: ~S + 1 while the job counted S - n + 1), and the job's first progress line counts the same. The page
    then goes away (its job stops: page_closed), not measuring the other words (test_readable_messages does).
    Where leave one word out itself was measured on this server already (the session's server is shared: a worker's
    test_readable_messages may have run first), the server says so by its own name, the page states no forward and
    the click shows the values at once, no progress line (was: "~S - n + 1 forwards" stated, none run)."""
    from playwright.sync_api import expect

    context = page.context.browser.new_context(viewport={"width": 1440, "height": 960})
    told: list = []  # the server's answers to the page's question what it knows (method_registry.SEGMENT_KNOWN_DETAIL)

    def on_response(r) -> None:
        if "/get_preds" in r.url and r.request.method == "POST":
            try:
                salience = r.json()[0]["salience"]
            except (ValueError, KeyError, IndexError, TypeError):
                return
            if isinstance(salience, dict) and fields.KNOWN_EXACT in salience:
                told.append(salience[fields.KNOWN_EXACT])

    try:
        fresh = context.new_page()
        fresh.set_default_timeout(60_000)
        fresh.on("response", on_response)
        mod = plugin_checks.open_lit(fresh, server_url, plugin_checks.SMALL_SCREEN)
        mod.locator("select.granularity").select_option("word")
        plugin_checks.select_and_wait(fresh, ROW)
        mod.locator("select.method").select_option(leave_one_out.NAME)
        every = mod.locator(".segment-status button.measure-all")
        for _ in range(600):  # the page asks once per selection; a failure bound, not a timing assertion
            if told:
                break
            fresh.wait_for_timeout(100)
        assert len(told) == 1, told
        plugin_checks.record_texts(mod, ".segment-status", "__ssEveryWord")
        if told[0] == {"method": leave_one_out.NAME, "measured": S}:  # measured here before: nothing runs
            expect(every).to_have_text("Measure each word by removing it: measured already, no forward")
            every.click()
            expect(mod.locator(".precision")).to_contain_text("prompts scored", timeout=TIMEOUT_MS)
            seen = fresh.evaluate("window.__ssEveryWord")
            assert not any(re.search(r"\d+ / \d+ forwards", t) for t in seen), seen
        else:
            assert told[0] == {"method": word_verified.NAME, "measured": n}, told
            expect(every).to_have_text(f"Measure each word by removing it: ~{S - n + 1} forwards")
            every.click()
            expect(mod.locator(".segment-status")).to_contain_text(re.compile(r"\d+ / \d+ forwards"),
                                                                   timeout=TIMEOUT_MS)
            totals = {int(m.group(2)) for t in fresh.evaluate("window.__ssEveryWord")
                      for m in re.finditer(r"(\d+) / (\d+) forwards", t)}
            assert totals == {S - n + 1}, totals
        fresh.goto("about:blank")  # pagehide: the page's job stops within one slice
    finally:
        context.close()
