"""What the user sees first (issue 42 §5), in a real browser against the real server: at sentence granularity the
constitutional-principles row's first map is the method the first-map rule chose from the shipped held-out figures
(sequence_salience/first_map.py; the gradient where no method clears the bar), named on the status line while exact
leave-one-out measures; then the exact map replaces it and the side panel says "confirmed" or what changed. The
values on screen equal leave-one-out computed here through the library for the same row; where the first map is a
segment method, the values the server sent the page for it (which segments it measured, and every value) equal that
method computed here through the library (the server orders attention_verified's candidates by the first
highlight's gradient, the library by one backward of its own: the same span, the same values); and the verdict
equals the one computed here from the library's first map and leave-one-out (top segment and top three).
The stages appear in order, each named (issue 42, session 37): where the first map's record has a first look
(attention_verified: learned attention attribution's estimate), its job's values so far first, hatched and named by
that method's label, then the first map's own values, then the exact map with the verdict, "confirmed" (issue 42's
"Done when" for this row). Screenshot: artifacts/e2e/first_map/verdict.png.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import sequence_salience as ss
from lit_app.schema import method_registry
from sequence_salience.methods import get_segment_method
from lit_app.data.datasets import CASE_STUDIES_PATH
from sequence_salience.ablation import segment_salience
from sequence_salience.methods import AblationConfig, DEFAULT_METHODS, get_any_method, leave_one_out
from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

ROW = "constitutional principles"
GRANULARITY = "sentence"
TIMEOUT_MS = 300_000
TOP_K = 3  # the verdict compares the top three (frontend/src/salience/confirm.ts CONFIRM_TOP_K)


def _row() -> dict:
    with open(CASE_STUDIES_PATH, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return next(r for r in rows if r["case"] == ROW)


# Every stage the status line and the side panel show, as it renders: "look:<method>" while the first map's job sends
# its values so far (the method they are named by, `.first-stage`), "first:<method>" its own values with exact leave
# one out measuring, "exact:<method>:<verdict>" the exact map on screen with its verdict ("confirmed", "changed"; ""
# before it renders); and every name `.first-stage` gives the values so far.
_RECORD_STAGES_JS = """(e) => {
  const seen = window.__ssStages = [];
  const names = window.__ssStageNames = [];
  const read = () => {
    const r = e.shadowRoot;
    const stage = r.querySelector('.segment-status .first-stage');
    const status = r.querySelector('.segment-status[data-auto="true"]');
    const verdict = r.querySelector('.side .confirm[data-verdict]');
    let now = '';
    if (stage) now = 'look:' + stage.dataset.method;
    else if (status && status.dataset.first) now = 'first:' + status.dataset.method;
    else if (status) now = 'exact:' + status.dataset.method + ':' + (verdict ? verdict.dataset.verdict : '');
    if (now && seen[seen.length - 1] !== now) seen.push(now);
    const text = stage ? stage.textContent.replace(/\\s+/g, ' ').trim() : '';
    if (text && names[names.length - 1] !== text) names.push(text);
  };
  new MutationObserver(read).observe(e.shadowRoot, {subtree: true, childList: true, characterData: true,
                                                    attributes: true});
}"""


def _top(values: np.ndarray, signed: bool) -> list[int]:
    """The module's top-list rule (frontend/src/salience/rank.ts): by |value| when signed, else by value (negative
    values left out); zeros left out; ties in text order."""
    keys = np.abs(values) if signed else values
    order = sorted((i for i in range(len(values)) if values[i] != 0 and (signed or values[i] > 0)),
                   key=lambda i: (-keys[i], i))
    return order[:TOP_K]


@pytest.fixture(scope="module")
def reference():
    """Leave one sentence out of the row (filler removal, the whole target) and the first map's values per the same
    sentences, computed through the library."""
    row = _row()
    lm = ss.load_model("default")
    chat = lm.format_prompt(row["prompt"], system=row["system"])
    exact = segment_salience(lm, chat, row["target"], leave_one_out.NAME, granularity=GRANULARITY,
                             config=AblationConfig())
    chosen = method_registry.FIRST_MAP_METHOD[GRANULARITY]
    if chosen is None:  # the gradient: the first highlight's, summed over each sentence's tokens
        first_name = DEFAULT_METHODS[0]
        grad = ss.compute_span_salience(lm, chat, row["target"], first_name)  # [N]
        first = np.array([float(grad[toks].sum()) for toks in exact.segment_tokens])
        measured = None
    else:
        first_name = chosen
        seg = segment_salience(lm, chat, row["target"], chosen, granularity=GRANULARITY, config=AblationConfig())
        first = np.asarray(seg.values, dtype=float)
        measured = [bool(m) for m in seg.measured_mask()]
    texts = [exact.text[s:e].strip() for s, e in exact.segments]
    return {"first": first_name, "first_values": first, "first_signed": get_any_method(first_name).signed,
            "first_measured": measured, "values": np.asarray(exact.values, dtype=float), "texts": texts,
            "spans": [[int(a), int(b)] for a, b in exact.segments]}


def test_first_map_named_then_confirmed_or_changed_by_exact_leave_one_out(server_url, browser_page, artifacts_dir,
                                                                          reference):
    from playwright.sync_api import expect

    page, external = browser_page
    sent: dict[str, dict] = {}  # segment method -> the segment values the server sent the page for this granularity

    def on_response(r) -> None:
        if "/get_preds" not in r.url or r.request.method != "POST":
            return
        try:
            seg = r.json()[0]["salience"]["segments"]
        except (ValueError, KeyError, IndexError, TypeError):
            return
        if seg.get("granularity") == GRANULARITY:
            sent[seg["method"]] = seg

    page.on("response", on_response)
    mod = plugin_checks.open_lit(page, server_url, plugin_checks.SMALL_SCREEN)
    mod.locator("select.granularity").select_option(GRANULARITY)
    # Every name the status line gives the first map, as it renders (it may show for less than a poll).
    plugin_checks.record_texts(mod, ".segment-status .first-map", "__ssFirstMap")
    plugin_checks.record_texts(mod, ".segment-status .stop-confirm", "__ssStop")
    mod.evaluate(_RECORD_STAGES_JS)
    plugin_checks.select_and_wait(page, ROW)

    # Then the exact map, with the verdict above the top list.
    status = mod.locator(f'.segment-status[data-method="{leave_one_out.NAME}"]')
    status.wait_for(timeout=TIMEOUT_MS)
    verdict = mod.locator(".side .confirm")
    expect(verdict).to_have_count(1)
    named = page.evaluate("window.__ssFirstMap")
    first_label = get_any_method(reference["first"]).label
    assert named and set(named) == {first_label}, f"the first map was named {named}, the rule chose {first_label}"
    expect(verdict).to_have_attribute("data-first", reference["first"])
    expect(status).to_contain_text(f"shown instead of the first map, {first_label}, once measured")
    # While it measured, a button stopped it (vitest: the polls end and the first map stays); now nothing to stop.
    assert page.evaluate("window.__ssStop") == ["Stop: keep this map"]
    assert mod.locator(".segment-status .stop-confirm").count() == 0

    # The values shown are leave-one-out's, as the library computes them for this row: the top list, in its order.
    items = mod.locator(".side .top .top-item")
    shown = [(item.get_attribute("title").strip(), float(item.get_attribute("data-value")))
             for item in items.all()]
    values, texts = reference["values"], reference["texts"]
    order = sorted((i for i in range(len(values)) if values[i] != 0), key=lambda i: (-abs(values[i]), i))
    expected = [(texts[i], float(values[i])) for i in order[:len(shown)]]
    assert [t for t, _ in shown] == [t for t, _ in expected]
    # The server's prefix reuse and batching against the library's defaults: equal to ~1e-5 nats (docs/benchmarks.md).
    np.testing.assert_allclose([v for _, v in shown], [v for _, v in expected], atol=1e-3)
    assert len(shown) >= TOP_K

    # The first map's values as the server sent them: the library's (a segment method; the gradient's are the first
    # highlight's, checked by the other e2e tests).
    if reference["first_measured"] is not None:
        assert reference["first"] in sent, f"no {reference['first']} values reached the page: {sorted(sent)}"
        got = sent[reference["first"]]
        assert got["spans"] == reference["spans"]
        assert got.get("measured", [True] * len(got["values"])) == reference["first_measured"]
        np.testing.assert_allclose(got["values"], reference["first_values"], atol=1e-3)

    # The verdict, computed here from the library's two maps.
    before = _top(reference["first_values"], reference["first_signed"])
    after = _top(values, True)
    confirmed = before[0] == after[0] and set(before) == set(after)
    expect(verdict).to_have_attribute("data-verdict", "confirmed" if confirmed else "changed")
    headline = verdict.locator(".confirm-headline")
    clip = lambda i: texts[i] if len(texts[i]) <= 40 else texts[i][:39] + "…"  # noqa: E731 (confirm.ts clip)
    if confirmed:
        expect(headline).to_contain_text(f"Confirmed by exact {get_any_method(leave_one_out.NAME).label.lower()}")
    else:
        expect(headline).to_contain_text(f"Changed by exact {get_any_method(leave_one_out.NAME).label.lower()}")
        expect(headline).to_contain_text(f"“{clip(after[0])}”")
        expect(verdict.locator(".confirm-before")).to_contain_text(
            f"First map ({first_label}): " + " ".join(f"{k + 1}. “{clip(i)}”" for k, i in enumerate(before)))
        expect(verdict.locator(".confirm-after")).to_contain_text(
            "Exact: " + " ".join(f"{k + 1}. “{clip(i)}”" for k, i in enumerate(after)))
    assert mod.locator(".status.error").count() == 0, mod.locator(".status.error").all_inner_texts()

    # The stages in order, named: the first look (where the record has one: the estimate, then the first map's own
    # name once a batch is verified), the first map, the exact map with its verdict.
    stages = [st for st in page.evaluate("window.__ssStages") if not st.endswith(":")]
    look = get_segment_method(reference["first"]).first_look if reference["first_measured"] is not None else None
    looks = [f"look:{look}", f"look:{reference['first']}"] if look is not None else []
    head = [st for st in stages if st.startswith("look:")]
    assert head[:1] == looks[:1] and set(head) <= set(looks), stages
    verdict_name = "confirmed" if confirmed else "changed"
    tail = ([f"first:{reference['first']}"] if reference["first_measured"] is not None else []) + [
        f"exact:{leave_one_out.NAME}:{verdict_name}"]
    assert stages == head + tail, stages
    if look is not None:
        names = page.evaluate("window.__ssStageNames")
        total = len(reference["values"])
        assert names[0] == f"{get_any_method(look).label}: 0 of {total} {GRANULARITY}s verified so far…", names
        assert all(n.startswith(get_any_method(reference["first"]).label + ": ") for n in names[1:]), names
    assert confirmed, "issue 42: the constitutional row's first map at sentence is confirmed by exact leave-one-out"
    page.mouse.move(5, 5)
    plugin_checks.screenshot(page, artifacts_dir / "first_map", "verdict")
    assert not external, f"requests to non-local hosts: {external}"

