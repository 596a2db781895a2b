"""Fixtures for browser tests: the real LIT server on a free port and Debian Chromium.

The server is the session's `lit_server` (tests/conftest.py: `python -m lit_app.server` on the default
model, a subprocess stopped at the end of the session); Chromium is /usr/bin/chromium driven by
Playwright's sync API (never `playwright install`), one browser per worker while it runs browser tests (`_Chromium`)
and a fresh context per test.
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path

import pytest

from lit_app.serving import assets
from tests.server_process import REPO

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


class _Chromium:
    """The worker's one Chromium (Playwright's sync API, Debian's /usr/bin/chromium), started by the first browser
    test and stopped after the last of a run of browser tests (`pytest_runtest_teardown` below), so that no
    Playwright driver stays alive while the worker goes on to the notebook or integration tests. Was one per test
    module: a launch and the first page of a new browser cost ~1 s of CPU more than a page of a running one, paid by
    each of the 25 files (docs/benchmarks.md, session 29). Each test still gets its own context (`browser_page`)."""

    def __init__(self):
        self._playwright = None
        self.browser = None

    def get(self):
        if self.browser is not None and not self.browser.is_connected():
            self.stop()  # it crashed: the next test gets a new one
        if self.browser is None:
            if not os.path.exists(CHROMIUM) and shutil.which("chromium") is None:
                pytest.fail("Debian chromium is not installed. Fix: apt-get install chromium (or `make chromium`).")
            from playwright import sync_api
            self._playwright = sync_api.sync_playwright().start()
            try:
                self.browser = self._playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                                args=CHROMIUM_ARGS)
            except BaseException:
                self.stop()
                raise
        return self.browser

    def stop(self) -> None:
        browser, playwright = self.browser, self._playwright
        self.browser = self._playwright = None
        try:
            if browser is not None and browser.is_connected():
                browser.close()
        finally:
            if playwright is not None:
                playwright.stop()


_CHROMIUM = _Chromium()
_E2E_DIR = Path(__file__).resolve().parent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test's own teardown (its context closed): stops the worker's Chromium when the next test is
    not a browser test (or there is none)."""
    yield
    if nextitem is None or _E2E_DIR not in Path(nextitem.path).resolve().parents:
        _CHROMIUM.stop()


def pytest_sessionfinish(session):
    _CHROMIUM.stop()


@pytest.fixture()
def chromium():
    """The worker's Chromium (`_Chromium`), shared by consecutive browser tests; each test gets its own context
    (`browser_page`)."""
    return _CHROMIUM.get()


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


@pytest.fixture(scope="session")
def two_model_server(tmp_path_factory):
    """Its own process, not the session's `lit_server`: two models (`--models a:default,b:<folder>`), b a tiny
    random Llama over the default model's tokenizer (tests/unit/tiny_models.py). One per session (per xdist worker),
    shared by the files that use it (test_compare_models.py, test_stacked_views.py: they open other prompts, and
    no test reads the server's state), so a worker that runs both starts it once (docs/benchmarks.md, "Session 38
    (h5)")."""
    import sequence_salience as ss
    from tests.server_process import ServerProcess
    from tests.unit.tiny_models import save_tiny_llama_for

    folder = save_tiny_llama_for(ss.load_model("default").tokenizer, tmp_path_factory.mktemp("tiny"))
    with ServerProcess(["--models", f"a:default,b:{folder}", "--max_new_tokens", "12"],
                       tmp_path_factory.mktemp("server")) as proc:
        yield proc
