"""Fixtures for browser tests: the real LIT server on a free port and Debian Chromium.

The server is `python -m lit_app.server` on the default model, started as a
subprocess and killed at the end; Chromium is /usr/bin/chromium driven by
Playwright's sync API (never `playwright install`).
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from lit_app import assets
from tests.server_process import ServerProcess

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
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a freshly started LIT server on the default model, with its ?token= (the first page load
    turns it into the cookie the page's requests carry, as for a user opening the printed URL)."""
    if not BUNDLE.is_file():
        pytest.fail(f"{BUNDLE} is missing: build it with `cd frontend && npm run build` (or `make frontend`).")
    if not assets.bundle_is_current(str(BUNDLE.parents[1])):
        # The page would run the old code: a bundle built before a change passes or fails for the wrong reason.
        pytest.fail(f"{BUNDLE} is older than frontend/src (or package.json): rebuild it with"
                    " `cd frontend && npm run build` (or `make frontend`).")
    # The repository's client root, as `make serve` serves it.
    with ServerProcess(["--host", "127.0.0.1"], tmp_path_factory.mktemp("server"), own_client_root=False) as proc:
        assert proc.token and proc.url == f"http://127.0.0.1:{proc.port}/?token={proc.token}", proc.url
        yield proc.url


class ExternalRequests(list):
    """URLs of requests the page made to hosts other than this machine."""


@pytest.fixture()
def browser_page(tmp_path: Path):
    """(page, external_requests): a Chromium page that records non-local requests."""
    if not os.path.exists(CHROMIUM) and shutil.which("chromium") is None:
        pytest.fail("Debian chromium is not installed. Fix: apt-get install chromium (or `make chromium`).")
    from playwright import sync_api
    external = ExternalRequests()

    def record(request) -> None:
        parsed = urllib.parse.urlparse(request.url)
        if parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname not in LOCAL_HOSTS:
            external.append(request.url)

    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path / "user-data"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 960})
        ctx.on("request", record)
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        page.set_default_timeout(60_000)
        try:
            yield page, external
        finally:
            ctx.close()
