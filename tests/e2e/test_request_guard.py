"""LIT's client in Chromium against the server's request rules (lit_app/edge/security.py).

LIT's client POSTs without a Content-Type; the request guard (loaded before
LIT's main.js) adds it, so the UI works while plain cross-site POSTs are
refused. With a token, the first page load (?token=) sets a cookie and the UI
keeps working without the token in the address bar.
"""

from __future__ import annotations

import re
import secrets

import pytest

from tests.server_process import ServerProcess

pytestmark = pytest.mark.e2e

ROWS = "data-table-module tbody tr"
FETCH = """async ([path, body]) => {
  const r = await fetch(path, {method: 'POST', body});
  return [r.status, await r.text()];
}"""
XHR = """([path, body]) => new Promise((resolve) => {
  const x = new XMLHttpRequest();
  x.open('POST', path);
  x.onload = () => resolve([x.status, x.responseText]);
  x.send(body);
})"""


def test_lit_client_passes_the_rules_and_shows_one_line_errors(server_url, browser_page):
    page, _ = browser_page
    posts, refused = [], []
    page.on("request", lambda r: posts.append((r.url, r.headers.get("content-type"))) if r.method == "POST" else None)
    page.on("response", lambda r: refused.append((r.url, r.status)) if r.status in (403, 405, 413) else None)
    page.goto(server_url)
    page.locator(ROWS).first.wait_for(timeout=120_000)
    assert page.evaluate("window.__ssRequestGuard") is True
    lit_posts = [p for p in posts if re.search(r"/get_(info|dataset|preds)", p[0])]
    assert lit_posts and all(ctype == "application/json" for _, ctype in lit_posts), posts
    assert not refused, refused
    # A one-line error body; the guard adds the "Details" LIT's status bar needs to show it.
    status, body = page.evaluate(FETCH, ["./get_preds?model=nope", '{"inputs": []}'])
    message, _, details = body.partition("\n\nDetails: ")
    assert status == 400 and message.startswith("Unknown model 'nope'") and details.startswith("HTTP 400")
    # The same POST outside the guard (text/plain, as a cross-site form could send) is refused.
    status, body = page.evaluate(XHR, ["./get_info", "{}"])
    assert status == 403 and "Content-Type" in body and "\n" not in body


def test_token_from_the_url_keeps_the_ui_working(browser_page, tmp_path):
    page, _ = browser_page
    token = secrets.token_hex(16)
    with ServerProcess(["--token", token], tmp_path) as proc:  # its own: the token is a start-up flag
        port = proc.port
        assert proc.url == f"http://127.0.0.1:{port}/?token={token}"
        page.goto(f"http://127.0.0.1:{port}/")
        assert "needs a token" in page.locator("body").inner_text()
        page.goto(f"http://127.0.0.1:{port}/?token={token}")
        page.locator(ROWS).first.wait_for(timeout=120_000)  # LIT's POSTs carried the cookie
        assert "token" not in page.url
        status, _ = page.evaluate(FETCH, ["./get_info", "{}"])
        assert status == 200
