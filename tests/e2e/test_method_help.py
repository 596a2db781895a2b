"""Issue 45 §2 in the browser at 1280x720, against the real server: the ⓘ beside the method's name opens a help that
gives every published method in two lines (what it measures and its cost, from the record's cost_unit; when to trust
it, the record's `trust`), on screen, then the colours, R², "not decidable", the automatic switch and the keys.
(Before: no such help; the module's (i) named four gradient methods only.)"""

from __future__ import annotations

import pytest

import sequence_salience as ss
from tests.e2e import plugin_checks

pytestmark = pytest.mark.e2e

# {select: the method select's width, names: {name: the width of a copy of it holding only that name, uncapped}}.
MENU_WIDTHS_JS = """(select, names) => {
  const width = (el) => el.getBoundingClientRect().width;
  const out = {select: width(select), names: {}};
  for (const name of names) {
    const probe = select.cloneNode(false);
    Object.assign(probe.style, {maxWidth: 'none', position: 'absolute', visibility: 'hidden'});
    probe.append(Object.assign(document.createElement('option'), {textContent: name}));
    select.parentNode.append(probe);
    out.names[name] = Math.round(width(probe) * 10) / 10;
    probe.remove();
  }
  return out;
}"""


def test_method_help_opens_from_the_method_name(server_url, browser_page, artifacts_dir):
    from playwright.sync_api import expect

    page, external = browser_page
    mod = plugin_checks.open_lit(page, server_url, plugin_checks.SMALL_SCREEN)
    expect(mod.locator("select.method option")).not_to_have_count(0)
    help_ = mod.locator('.method-help[data-where="controls"]')
    help_.locator("summary").click()
    panel = help_.locator(".method-help-panel")
    expect(panel).to_be_visible()
    records = ss.methods.registry_json(kinds=("token", "segment"))
    assert len(records) >= 6
    for m in records:
        item = panel.locator(f'li[data-method="{m["name"]}"]')
        expect(item.locator("b")).to_have_text(m["label"])
        expect(item.locator(".help-what")).to_contain_text(f"Cost: {m['cost_unit']}")
        expect(item.locator(".help-trust")).to_have_text(f"When to trust it: {m['trust']}")
    for title in ("Colours", "R²", '"Not decidable"', "The automatic switch", "Show gradient", "Keys"):
        expect(panel.locator(".help-section b", has_text=title)).to_have_count(1)
    # Readable where it appears: inside the 1280 px viewport, left edge on screen.
    box = panel.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= plugin_checks.SMALL_SCREEN["width"], box
    page.screenshot(path=str(artifacts_dir / "method-help.png"))
    panel.locator("button.help-close").click()
    expect(panel).to_be_hidden()
    # Every method's name is readable whole in the method select at 1280x720 (its width capped so that the controls
    # stay on one line): a select of that one name, uncapped, is no wider than the select on screen. (Before: "Estimate,
    # then leave" of word_verified's label, and four more labels, were cut off.) The full label is the option's title.
    select = mod.locator("select.method")
    widths = select.evaluate(MENU_WIDTHS_JS, [m["menu"] for m in records])
    print(f"\nthe method select: {widths['select']:.1f} px; each name alone: {widths['names']}")
    cut = {name: w for name, w in widths["names"].items() if w > widths["select"]}
    assert not cut, f"cut off in the {widths['select']:.1f} px method select: {cut}"
    shown = {m["name"]: m for m in records}[select.input_value()]
    expect(select.locator("option:checked")).to_have_text(shown["menu"])
    expect(select.locator("option:checked")).to_have_attribute("title", shown["label"])
    assert not external, f"requests to non-local hosts: {external}"
