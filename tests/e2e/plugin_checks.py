"""Browser steps and checks shared by the e2e tests (the plugin tests: installed wheel, own LIT server,
interop; and the module tests on the session server).

`open_lit(page, url, size)` opens LIT (in a `size` window) and waits for our salience module;
`select_example(page, prompt)` clicks a data-table row, `select_and_wait` also waits for the salience
module to be ready, `open_and_select(page, url, prompt)` does all three at 1280×720; `screenshot(page, folder,
name)` saves one, `doc_picture(shot, name)` copies it to docs/ with UPDATE_SCREENSHOTS=1 (docs/screenshots.md);
`request_inputs(body)` reads the inputs a page's /get_preds request sent.
`REPO` (tests/server_process.py) is the repository's root for every e2e file.

Two models (`two_model_server`, tests/e2e/conftest.py): `model_button(page, name)` is LIT's model selector
button; `open_both_models(page, url)` selects both and a row and waits for both salience modules;
`open_compare_models(page, salience_a)` opens Compare models in model a's module and waits for the comparison.

`three_modules_and_first_highlight(page, url)` is what "our modules work in this page" means:
the salience, inside-the-model and test-this-explanation modules are defined and rendered,
selecting a shipped example paints the first highlight (salience of the whole response), and
the inside module follows it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from tests.server_process import REPO

SALIENCE_TAG = "prompt-salience-module"
INSIDE_TAG = "inside-model-module"
EXPLAIN_TAG = "explain-test-module"
TAGS = (SALIENCE_TAG, INSIDE_TAG, EXPLAIN_TAG)
# A shipped example (lit_app/data/case_studies.jsonl); its greedy answer names Paris.
EXAMPLE_PROMPT = "What is the capital of France?"
LOAD_TIMEOUT_MS = 300_000
SMALL_SCREEN = {"width": 1280, "height": 720}  # the laptop window the issues' browser checks use
READY = "[data-state=ready]"  # the salience module shows the answer and its salience
FEW_SHOT = "Classify the sentiment"  # lit_app/data/case_studies.jsonl: the longest prompt of the shipped rows
MIN_LINES = 5  # a prompt box of fewer lines is not readable (issue 45 §5: two lines, or none)
# The lines of an element's text box that are on screen: its rectangle cut to the module's and the window's, less its
# padding and borders, in line heights (the box scrolls its own text: its height is what it shows).
VISIBLE_LINES_JS = """(m, sel) => { const r = m.shadowRoot, box = r.querySelector(sel);
  if (box === null) return 0;
  const b = box.getBoundingClientRect(), mod = r.querySelector('.module').getBoundingClientRect();
  const s = getComputedStyle(box), px = (k) => parseFloat(s[k]);
  const shown = Math.min(b.bottom, mod.bottom, innerHeight) - Math.max(b.top, mod.top, 0);
  const pad = px('paddingTop') + px('paddingBottom') + px('borderTopWidth') + px('borderBottomWidth');
  return Math.max(0, Math.floor((shown - pad) / px('lineHeight') + 0.01)); }"""
# IG step counts of the tests that run IG on the example row and watch the run from its start (its progress, its
# cancellation). The session's server keeps span results by prompt, target and counts, and xdist may give two of
# these files to one worker: a count that a test there completed first is answered from the cache, with nothing
# to watch (test_superseded_span failed so after test_matrix_cancel, both at 128 steps). One count per run.
IG_STEPS_OF_ITS_OWN = {
    "matrix_cancel": 12,  # test_matrix_cancel: the span completes, its per-token IG job is cancelled (was 128, 24)
    "superseded_first": 256,  # test_superseded_span: replaced mid-run by the next count
    "superseded_new": 96,  # test_superseded_span: may complete before the page closes
    "switched_away": 224,  # test_true_progress: cancelled mid-run by a switch of method
    "recorded": 112,  # test_true_progress: recorded to the end
    "accepted_after_refusals": 5,  # test_true_progress: the valid count after the refused ones (completes)
    "salience_module": 4,  # test_salience_module: waits for this count's map after resetting its action marker
    "previous_map": 10,  # test_previous_map: the few-shot row's IG span, watched while it computes (was 24)
    "heatmap_rows": 3,  # test_ig_completeness: the per-token IG matrix whose rows the heatmap hides
    "page_closed": 20,  # test_page_closed: the closed page's per-token IG job, cancelled by the heartbeat (was 48)
    "other_page_click": 6,  # test_page_closed: the other page's clicked span, answered by the server
}
if len(set(IG_STEPS_OF_ITS_OWN.values())) != len(IG_STEPS_OF_ITS_OWN):
    raise ValueError(f"two runs share an IG step count: {IG_STEPS_OF_ITS_OWN}; give each its own")
# Samples the explain module's curves result (found through the shadow roots, `tag` its element) every 50 ms
# into window.__curves: one entry per change of what is shown (coarse or full, points, random orders, the
# coarse label, upper-bound lines, the module's run state), `t` in seconds after window.__t0 (set here).
# Used by tests/e2e/test_coarse_curves.py and benchmarks/bench_explain_first_result.py; stop it and read
# the entries with CURVES_READ_JS.
CURVES_RECORDER_JS = """(tag) => {
  window.__curves = [];
  window.__t0 = performance.now();
  const t0 = window.__t0;
  const find = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.tagName.toLowerCase() === tag) return el;
      if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; }
    }
    return null;
  };
  let last = '';
  window.__curvesTimer = setInterval(() => {
    const m = find(document);
    const c = m && m.shadowRoot && m.shadowRoot.querySelector('.result > div.curves');
    const label = c ? (c.querySelector('.preliminary-label')?.textContent ?? '').trim() : '';
    const entry = c ? {preliminary: c.classList.contains('preliminary'), steps: c.dataset.steps ?? null,
                       random: c.dataset.random ?? null, label,
                       upper: c.querySelectorAll('svg.chart path.line.upper-bound').length,
                       running: m.dataset.run ?? ''} : null;
    const key = JSON.stringify(entry);
    if (entry && key !== last) { last = key; window.__curves.push({...entry, t: (performance.now() - t0) / 1000}); }
  }, 50);
}"""
CURVES_READ_JS = "() => { clearInterval(window.__curvesTimer); return window.__curves; }"


def defined_tags(page) -> dict[str, bool]:
    """{custom-element tag: defined in this page}."""
    return page.evaluate("tags => Object.fromEntries(tags.map(t => [t, !!customElements.get(t)]))", list(TAGS))


def highlighted_segments(mod) -> int:
    return mod.locator('.prompt .seg[style*="background"]').count()


def open_tab(page, title: str) -> None:
    """Opens LIT's tab `title` when the layout has one (our default layout's module tabs).

    The whole title must match: the own-server example also has a tab "LIT's Sequence Salience".
    """
    tab = page.locator(".tab", has_text=re.compile(rf"^\s*{re.escape(title)}\s*$"))
    if tab.count():
        tab.first.click()


def open_lit(page, url: str, size: dict[str, int] | None = None):
    """Opens LIT at `url` (in a window of `size`, {"width", "height"}, when given) and waits until the
    salience module is rendered; returns its locator."""
    if size is not None:
        page.set_viewport_size(size)
    page.goto(url)
    salience = page.locator(SALIENCE_TAG)
    salience.wait_for(timeout=120_000)
    return salience


def select_example(page, prompt: str = EXAMPLE_PROMPT) -> None:
    page.locator("data-table-module tbody tr", has_text=prompt).first.click()


def select_and_wait(page, prompt: str = EXAMPLE_PROMPT, until: str = READY) -> None:
    """Clicks `prompt`'s row and waits until the salience module matches `until` (an attribute selector)."""
    select_example(page, prompt)
    page.locator(f"{SALIENCE_TAG}{until}").wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)


def open_and_select(page, url: str, prompt: str = EXAMPLE_PROMPT, until: str = READY):
    """`open_lit` at 1280×720, then `select_and_wait` on `prompt`'s row (until the salience module matches
    `until`); returns the salience module's locator (`open_both_models` is the same for two models)."""
    salience = open_lit(page, url, SMALL_SCREEN)
    select_and_wait(page, prompt, until)
    return salience


def inside(box: dict | None, area: dict, what: str) -> None:
    """`box` is rendered and lies within `area` (both {x, y, width, height}); 1 px of rounding allowed."""
    assert box is not None, f"{what} is not rendered"
    ok = (box["x"] >= area["x"] - 1 and box["y"] >= area["y"] - 1
          and box["x"] + box["width"] <= area["x"] + area["width"] + 1
          and box["y"] + box["height"] <= area["y"] + area["height"] + 1)
    assert ok, f"{what} at {box} is outside {area}"


def top_on_screen(box: dict | None, area: dict, what: str, lines: float = 40) -> None:
    """The first `lines` px of `box` lie inside `area` (a tall box may go on below it)."""
    assert box is not None, f"{what} is not rendered"
    inside({**box, "height": min(box["height"], lines)}, area, what)


def screenshot(page, folder: Path, name: str) -> Path:
    """Saves the page as folder/name.png (making the folder); returns the path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def doc_picture(shot: Path, name: str) -> None:
    """With UPDATE_SCREENSHOTS=1, copies the screenshot `shot` to docs/`name`, a picture the docs show
    (docs/screenshots.md lists them); otherwise nothing."""
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, REPO / "docs" / name)


def visible_lines(mod, selector: str = ".body .text.prompt") -> int:
    """The lines of `mod`'s text box `selector` that a reader sees (VISIBLE_LINES_JS)."""
    return mod.evaluate(VISIBLE_LINES_JS, selector)


def legend_max(legend) -> float:
    """The value a legend (its .legend-labels) ends at."""
    return float(legend.locator(".legend-labels span").last.inner_text())


# Records every text of the elements matching `selector` in the element's shadow root, in the order they render,
# into window[name] (a text may last less than a frame: reading the page afterwards could miss it).
_RECORD_TEXTS_JS = """(e, [selector, name]) => {
  const seen = window[name] = [];
  const read = () => {
    for (const s of e.shadowRoot.querySelectorAll(selector)) {
      const t = s.textContent.replace(/\\s+/g, ' ').trim();
      if (t && seen[seen.length - 1] !== t) seen.push(t);
    }
  };
  new MutationObserver(read).observe(e.shadowRoot, {subtree: true, childList: true, characterData: true});
}"""


def record_texts(element, selector: str, name: str) -> None:
    """From now on, every text of `selector` inside `element`'s shadow root (a locator) goes to window[`name`]
    as it renders (read it with `page.evaluate(f"window.{name}")`)."""
    element.evaluate(_RECORD_TEXTS_JS, [selector, name])


def model_button(page, name: str):
    """LIT's model selector button of model `name` (the toolbar)."""
    return page.locator("button.headline-button", has=page.locator(
        "span.headline-button-text", has_text=re.compile(f"^{name}$")))


def open_both_models(page, url: str, prompt: str = EXAMPLE_PROMPT):
    """Opens LIT at 1280×720 with model a, adds b in LIT's model selector, selects `prompt` and waits until both
    salience modules show their first highlight; returns (salience module of a, of b)."""
    page.set_viewport_size(SMALL_SCREEN)
    page.goto(url)
    page.locator(SALIENCE_TAG).wait_for(timeout=120_000)
    model_button(page, "b").click()
    sal = {m: page.locator(f'{SALIENCE_TAG}[model="{m}"]') for m in ("a", "b")}
    for m in ("a", "b"):
        sal[m].wait_for(timeout=60_000)
    select_example(page, prompt)
    for m in ("a", "b"):
        page.locator(f'{SALIENCE_TAG}[model="{m}"]{READY}').wait_for(state="attached", timeout=LOAD_TIMEOUT_MS)
    return sal["a"], sal["b"]


def open_compare_models(page, salience_a):
    """Opens Compare models in model a's salience module (`salience_a`, its section's toggle) and waits until
    the comparison is drawn; returns the section's locator."""
    section = salience_a.locator(".compare-models")
    section.locator("button.toggle").click()
    page.locator(f'{SALIENCE_TAG}[model="a"][data-compare-models="done"]').wait_for(state="attached",
                                                                                   timeout=LOAD_TIMEOUT_MS)
    return section


def request_inputs(body: str | None) -> list[dict]:
    """The data of each input a /get_preds request body sends (LIT's JSON: {"inputs": [...]}); [] for
    another body."""
    try:
        inputs = json.loads(body or "{}").get("inputs", [])
    except ValueError:
        return []
    return [ex.get("data", ex) for ex in inputs if isinstance(ex, dict)]


def three_modules_and_first_highlight(page, url: str, prompt: str = EXAMPLE_PROMPT) -> dict[str, str]:
    """Opens `url`, checks the three modules, selects `prompt`, waits for the first highlight.

    Returns {"response": the salience module's response text, "inside_target": the traced token}.
    """
    from playwright.sync_api import expect

    salience = open_lit(page, url)
    assert defined_tags(page) == {t: True for t in TAGS}, defined_tags(page)
    expect(salience).to_contain_text("Select a prompt")
    inside = page.locator(INSIDE_TAG)
    # In the default layout Inside the model is a tab beside the salience module (LIT renders a
    # module only while its tab is open); in a layout that shows both, the clicks change nothing.
    open_tab(page, "Inside the model")
    expect(inside).to_contain_text("Select a prompt")
    open_tab(page, "Sequence Salience")

    select_and_wait(page, prompt)
    assert highlighted_segments(salience) > 0, "no highlighted prompt segment after selecting an example"
    assert "whole response" in salience.locator(".target-desc").inner_text()
    response = salience.locator(".response").inner_text().strip()
    assert response, "the salience module shows no response"
    open_tab(page, "Inside the model")
    expect(inside.locator(".target-token")).not_to_be_empty(timeout=LOAD_TIMEOUT_MS)
    inside_target = inside.locator(".target-token").inner_text()

    page.locator(".tab", has_text="Test this explanation").first.click()
    explain = page.locator(EXPLAIN_TAG)
    expect(explain.locator(".for")).to_contain_text("target:", timeout=60_000)
    return {"response": response, "inside_target": inside_target}


def edit_and_compare(page, old: str, new: str) -> None:
    """In LIT's datapoint editor, replaces `old` by `new` in the selected row's prompt and presses "Add and compare"
    (LIT pins the original and selects the edit: the salience module compares them)."""
    page.get_by_text("Editor", exact=True).first.click()
    editor = page.locator("single-datapoint-editor-module")
    box = editor.locator(".entry", has_text="prompt").first.locator("textarea")
    box.fill(box.input_value().replace(old, new))
    box.dispatch_event("input")
    editor.locator("button#compare").click()


_ON_TOP_JS = """(e) => {
  const r = e.getBoundingClientRect();
  const hit = e.getRootNode().elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
  return hit !== null && e.contains(hit);
}"""


def help_opens_at(page, name, method: str, shot: Path | None = None) -> None:
    """Clicks `name` (the locator of a method's name, shared/method_help.ts `methodNameView`) and checks the help it
    opens: the one panel of every published method's two lines, `method`'s entry marked, on screen inside the window,
    with the record's label, cost and `trust` (a screenshot to `shot`, when given); then closes it."""
    from playwright.sync_api import expect

    import sequence_salience as ss

    record = next(m for m in ss.methods.registry_json(kinds=("token", "segment")) if m["name"] == method)
    expect(name).to_have_attribute("data-method", method)
    name.locator("summary").click()
    panel = name.locator(".method-help-panel")
    expect(panel).to_be_visible()
    expect(panel.locator("li[data-method]")).to_have_count(len(ss.methods.registry_json(kinds=("token", "segment"))))
    entry = panel.locator("li.current")
    expect(entry).to_have_attribute("data-method", method)
    expect(entry.locator("b")).to_have_text(record["label"])
    expect(entry.locator(".help-what")).to_contain_text(f"Cost: {record['cost_unit']}")
    expect(entry.locator(".help-trust")).to_have_text(f"When to trust it: {record['trust']}")
    view = page.viewport_size
    for box in (panel.bounding_box(), entry.bounding_box()):
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= view["width"], (box, view)
        assert box["y"] >= 0 and box["y"] + box["height"] <= view["height"], (box, view)
    # Readable: nothing of the page (another module, a clipping box) covers the entry's middle.
    assert entry.evaluate(_ON_TOP_JS), f"{method}'s help entry is covered where it appears"
    if shot is not None:
        page.screenshot(path=str(shot))
    panel.locator("button.help-close").click()
    expect(panel).to_be_hidden()
