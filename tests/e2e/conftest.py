"""Fixtures for browser tests: the real LIT server on a free port and Debian Chromium.

The server is the session's `lit_server` (tests/conftest.py: `python -m lit_app.server` on the default
model, a subprocess stopped at the end of the session); Chromium is /usr/bin/chromium driven by
Playwright's sync API (never `playwright install`), one browser per worker while it runs browser tests (`_Chromium`)
and a new page per test in its one profile, with no cookies or site storage left by the tests before.
"""

from __future__ import annotations

import os
import shutil
import tempfile
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
VIEWPORT = {"width": 1440, "height": 960}
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
    each of the 25 files (docs/benchmarks.md, session 29).

    It runs on a profile of its own (a temporary folder, removed by `stop`), whose one context (`context`) every
    test's page opens in (`browser_page`): its disk cache keeps LIT's main.js and our bundle and V8's code cache for
    them, so a page load compiles them once per worker, not once per test (a fresh context is off the record: no
    code cache; a LIT page load cost 2.0 s of CPU there, 0.9 s here; docs/benchmarks.md, "Session 40 (h5)").
    Between tests `forget_sites` clears the cookies and every site's storage; a test that needs a context of its
    own still gets one from `browser` (`chromium`)."""

    def __init__(self):
        self._playwright = None
        self._profile: str | None = None
        self.context = None
        self._keeper = None  # the profile's first tab, kept open so that closing a test's pages never ends the browser
        self.sites: set[str] = set()  # origins the pages requested since the last `forget_sites`

    @property
    def browser(self):
        return self.context.browser

    def get(self):
        if self.context is not None and not self.browser.is_connected():
            self.stop()  # it crashed: the next test gets a new one
        if self.context is None:
            if not os.path.exists(CHROMIUM) and shutil.which("chromium") is None:
                pytest.fail("Debian chromium is not installed. Fix: apt-get install chromium (or `make chromium`).")
            from playwright import sync_api
            self._playwright = sync_api.sync_playwright().start()
            self._profile = tempfile.mkdtemp(prefix="e2e-chromium-")
            try:
                self.context = self._playwright.chromium.launch_persistent_context(
                    self._profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT)
                self._keeper = self.context.pages[0] if self.context.pages else self.context.new_page()
            except BaseException:
                self.stop()
                raise
        return self.context

    def close_pages(self) -> None:
        """Closes every page of the context but the keeper (each fires `pagehide`, as closing a context does)."""
        for page in self.context.pages:
            if page is not self._keeper:
                page.close()

    def forget_sites(self) -> None:
        """Clears the context's cookies and the storage (local storage, IndexedDB, service workers, Cache API) of
        every origin its pages requested; the HTTP cache and V8's code cache stay."""
        self.context.clear_cookies()
        cdp = self.context.new_cdp_session(self._keeper)
        try:
            for origin in sorted(self.sites):
                cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
        finally:
            cdp.detach()
        self.sites.clear()

    def stop(self) -> None:
        context, playwright, profile = self.context, self._playwright, self._profile
        self.context = self._playwright = self._profile = self._keeper = None
        self.sites.clear()
        try:
            if context is not None and context.browser.is_connected():
                context.close()
        finally:
            try:
                if playwright is not None:
                    playwright.stop()
            finally:
                if profile is not None:
                    shutil.rmtree(profile, ignore_errors=True)


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
    """The worker's Chromium browser (`_Chromium`), shared by consecutive browser tests, for a test that needs a
    context of its own (a second person's page); `browser_page` gives each test its page."""
    return _CHROMIUM.get().browser


@pytest.fixture()
def browser_page():
    """(page, external_requests): a new page that records non-local requests, with no cookies and no site storage
    (local storage, IndexedDB, ...) left by any earlier test, as in a new profile; LIT's scripts may come from the
    worker's HTTP cache (`_Chromium`). Its pages (and any other tab it opened) are closed after the test."""
    external = ExternalRequests()
    context = _CHROMIUM.get()

    def record(request) -> None:
        parsed = urllib.parse.urlparse(request.url)
        if parsed.scheme in ("http", "https"):
            _CHROMIUM.sites.add(f"{parsed.scheme}://{parsed.netloc}")
        if parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname not in LOCAL_HOSTS:
            external.append(request.url)

    _CHROMIUM.forget_sites()
    context.on("request", record)
    page = context.new_page()  # at VIEWPORT, the context's
    page.set_default_timeout(60_000)
    try:
        yield page, external
    finally:
        try:
            _CHROMIUM.close_pages()
        finally:
            context.remove_listener("request", record)


@pytest.fixture(scope="session")
def two_model_server(tmp_path_factory):
    """Its own process, not the session's `lit_server`: two models (`--models a:default,b:<folder>`), b a tiny
    random Llama over the default model's tokenizer (tests/unit/tiny_models.py). One per session (per xdist worker);
    its tests are in one file (test_compare_models.py: its own and the two-model stacked views, which were in
    test_stacked_views.py; they open other prompts, and no test reads the server's state), so that a worker starts it
    once (was: twice when the two files went to two workers; docs/benchmarks.md, "Session 38 (h5)", "Session 40
    (h3)"). b needs only a's tokenizer: it is read from the default model's converted folder, without loading a's
    weights into this worker (3.9 s of CPU with them, 1.8 s without; docs/benchmarks.md, "Session 41 (h4)")."""
    from transformers import AutoTokenizer

    from sequence_salience.model import convert_gguf, default_gguf_path
    from tests.server_process import ServerProcess
    from tests.unit.tiny_models import save_tiny_llama_for

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(default_gguf_path()))
    folder = save_tiny_llama_for(tokenizer, tmp_path_factory.mktemp("tiny"))
    with ServerProcess(["--models", f"a:default,b:{folder}", "--max_new_tokens", "12"],
                       tmp_path_factory.mktemp("server")) as proc:
        yield proc
