"""Fixtures for browser tests: the real LIT server on a free port and Debian Chromium.

The server is the session's `lit_server` (tests/conftest.py: `python -m lit_app.server` on the default
model, a subprocess stopped at the end of the session); Chromium is /usr/bin/chromium driven by
Playwright's sync API (never `playwright install`), one browser per test module and a fresh context per
test.
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path

import pytest

from lit_app.serving import assets

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "frontend" / "dist" / "sequence_salience.js"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = REPO / "artifacts" / "e2e"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def server_url(request: pytest.FixtureRequest) -> str:
    """URL of the session's LIT server (`lit_server`) on the default model, with its ?token= (the first page
    load turns it into the cookie the page's requests carry, as for a user opening the printed URL)."""
    if not BUNDLE.is_file():
        pytest.fail(f"{BUNDLE} is missing: build it with `cd frontend && npm run build` (or `make frontend`).")
    if not assets.bundle_is_current(str(BUNDLE.parents[1])):
        # The page would run the old code: a bundle built before a change passes or fails for the wrong reason.
        pytest.fail(f"{BUNDLE} is older than frontend/src (or package.json): rebuild it with"
                    " `cd frontend && npm run build` (or `make frontend`).")
    return request.getfixturevalue("lit_server").url  # started after the checks: the page needs the bundle


class ExternalRequests(list):
    """URLs of requests the page made to hosts other than this machine."""


@pytest.fixture(scope="module")
def chromium():
    """One Chromium per test module (Playwright's sync API, Debian's /usr/bin/chromium): starting one costs
    seconds on 2 cores, so the tests of a module share it; each test gets its own context (`browser_page`)."""
    if not os.path.exists(CHROMIUM) and shutil.which("chromium") is None:
        pytest.fail("Debian chromium is not installed. Fix: apt-get install chromium (or `make chromium`).")
    from playwright import sync_api
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def browser_page(chromium):
    """(page, external_requests): a page in a fresh browser context (its own cookies, storage and cache,
    as a new profile) that records non-local requests."""
    external = ExternalRequests()

    def record(request) -> None:
        parsed = urllib.parse.urlparse(request.url)
        if parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname not in LOCAL_HOSTS:
            external.append(request.url)

    ctx = chromium.new_context(viewport={"width": 1440, "height": 960})
    ctx.on("request", record)
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        yield page, external
    finally:
        ctx.close()
