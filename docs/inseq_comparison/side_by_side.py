"""docs/inseq_comparison/side_by_side.png: our shared page's answer x prompt matrix above inseq's heatmap of the
same prompt and model (ours is wide and short, theirs narrow and tall), as Chromium draws each file of this folder
(ours_share.html, inseq_input_x_gradient.html); the whole of each table, none scrolled away.

    .venv/bin/python docs/inseq_comparison/ours.py          # writes ours_share.html (not kept in the repo)
    .venv/bin/python docs/inseq_comparison/side_by_side.py
"""

from __future__ import annotations

import base64
import html
import pathlib
import tempfile

from playwright.sync_api import sync_playwright

HERE = pathlib.Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"  # as tests/e2e/conftest.py


def _shot(browser, page_file: str, selector: str, out: pathlib.Path, width: int) -> None:
    page = browser.new_page(viewport={"width": width, "height": 720})  # wide enough that no column scrolls away
    page.goto((HERE / page_file).as_uri())
    page.locator(selector).first.screenshot(path=str(out))
    page.close()


def _data_uri(png: pathlib.Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def main() -> None:
    with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        ours, theirs = pathlib.Path(tmp, "ours.png"), pathlib.Path(tmp, "inseq.png")
        _shot(browser, "ours_share.html", "table.ss-matrix", ours, 3200)
        _shot(browser, "inseq_input_x_gradient.html", "table", theirs, 1280)
        page = browser.new_page(viewport={"width": 2600, "height": 720})
        cap = "font: 15px system-ui, sans-serif; margin: 0 0 6px; max-width: 1200px"
        page.set_content(
            '<body style="margin:12px;background:#fff"><div style="display:flex;flex-direction:column;gap:24px;align-items:flex-start">'
            f'<div><p style="{cap}"><b>Sequence Salience</b> (ours_share.html): rows = answer tokens, columns = '
            "prompt words and the answer's earlier tokens (italic), gradient × input in nats, signed colours, "
            f'chat markup left out</p><img src="{_data_uri(ours)}"></div>'
            f'<div><p style="{cap}"><b>inseq 0.7.1</b> (inseq_input_x_gradient.html): rows = every token the model '
            "saw, columns = generated tokens, L2 norm renormalised per column; its colours are written as "
            f'{html.escape("rgba(np.float64(...))")}, which browsers ignore</p><img src="{_data_uri(theirs)}"></div>'
            "</div></body>")
        page.wait_for_load_state("load")
        page.screenshot(path=str(HERE / "side_by_side.png"), full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
