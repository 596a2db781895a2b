"""Builds the client root the LIT server serves: LIT's prebuilt UI, our bundle, local fonts.

Layout of the built folder (LIT's server serves `/` from `static/index.html`
and every other path relative to the folder):

    main.js, main.js.map, ...     LIT's prebuilt client (lit_nlp/client/build/default)
    static/index.html             LIT's page, rewritten: no internet links, our bundle added
    static/favicon.png, ...
    sequence_salience.js(.map)    our bundle, when it has been built
    request_guard.js              fetch wrapper for the server's request rules (built from frontend/src/request_guard.ts; lit_app/serving/request_guard.py)
    fonts/fonts.css, fonts/*.woff2 Roboto, Roboto Mono, Material Icons

Our files come from `lit_app/serving/assets.py`: in a checkout from frontend/dist and the npm
font packages in frontend/node_modules; in an installed wheel from the package data
`lit_app/dist/` (gathered at packaging time, `setup.py`). The folder is written where the
user can write: lit_app/client_root in a checkout (git-ignored), else
`<cache dir>/client_root` (`sequence_salience.model.cache_dir()`, $SEQUENCE_SALIENCE_CACHE or
~/.cache/sequence_salience), never into site-packages.

The build is cheap to repeat: a file is copied only when its source's size or
mtime changed, and the rewritten index.html is written only when its text
changed. Nothing in the result points outside the machine.
"""

from __future__ import annotations

import logging
import os
import re

from lit_app.serving import assets, request_guard
from sequence_salience.files import atomic_copy, atomic_write_text

logger = logging.getLogger(__name__)


def client_root_dir() -> str:
    """Default client root: lit_app/client_root in a checkout, else <cache dir>/client_root."""
    if assets.is_checkout():
        return os.path.join(assets.PACKAGE_DIR, "client_root")
    from sequence_salience.model import cache_dir  # pylint: disable=import-outside-toplevel

    return str(cache_dir() / "client_root")


DEFAULT_OUTPUT_DIR = client_root_dir()
BUNDLE_NAME = assets.BUNDLE_NAME
FONTS_DIR = assets.FONTS_DIR
FONTS_CSS = assets.FONTS_CSS
REPO_ROOT = assets.REPO_ROOT

_MAIN_JS_TAG = re.compile(r'<script\s+src="main\.js"\s*>\s*</script>')
# LIT's index.html loads Google Fonts / Material Icons stylesheets from the internet.
_REMOTE_LINK = re.compile(r'[ \t]*<link\b[^>]*href="https?://[^"]*"[^>]*>[ \t]*\n?')


def lit_client_dir() -> str:
    """LIT's prebuilt client folder (has main.js and static/index.html)."""
    import lit_nlp  # pylint: disable=import-outside-toplevel

    return os.path.join(os.path.dirname(os.path.abspath(lit_nlp.__file__)), "client", "build", "default")


def _copy_if_changed(src: str, dst: str) -> bool:
    """Copies src to dst unless dst has the same size and mtime; returns True if copied."""
    st = os.stat(src)
    try:
        dt = os.stat(dst)
        if dt.st_size == st.st_size and int(dt.st_mtime) == int(st.st_mtime):
            return False
    except FileNotFoundError:
        pass
    atomic_copy(src, dst)  # keeps mtime, so the next build sees it unchanged
    return True


def _write_if_changed(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    atomic_write_text(path, text)
    return True


def rewrite_index_html(html: str, has_bundle: bool, has_fonts: bool) -> str:
    """LIT's index.html with remote font links replaced by local ones, the request guard and our bundle added."""
    html = _REMOTE_LINK.sub("", html)
    # The request guard (lit_app/serving/request_guard.py) must wrap fetch before LIT's main.js runs.
    html = _MAIN_JS_TAG.sub(lambda m: f'<script src="{request_guard.REQUEST_GUARD_NAME}"></script>\n  ' + m.group(0),
                            html, count=1)
    if has_fonts:
        html = html.replace(
            "</head>", f'  <link href="{FONTS_DIR}/{FONTS_CSS}" rel="stylesheet">\n</head>', 1
        )
    if has_bundle:
        if not _MAIN_JS_TAG.search(html):
            raise ValueError("LIT's index.html has no <script src=\"main.js\"> tag to add the bundle after.")
        html = _MAIN_JS_TAG.sub(
            lambda m: m.group(0) + f'\n  <script src="{BUNDLE_NAME}"></script>', html, count=1
        )
    return html


def build_client_root(
    output_dir: str | None = None,
    bundle_path: str | None = None,
    node_modules: str | None = None,
    lit_dir: str | None = None,
) -> str:
    """Builds (or refreshes) the client root folder and returns its path.

    Args:
      output_dir: where to write it (default: `client_root_dir()`).
      bundle_path: our bundle (default: the checkout's frontend/dist, else the package data).
      node_modules: npm packages with the fonts (default: the checkout's; an installed wheel
        uses the fonts gathered into its package data).
      lit_dir: LIT's prebuilt client (default: the installed lit_nlp's).

    Missing pieces degrade with a warning rather than an error: without the
    bundle the page is LIT's plain UI; without the fonts icons fall back to text;
    without the built request guard the server runs but refuses the page's POSTs.
    """
    sources = assets.find()
    output_dir = output_dir or client_root_dir()
    if bundle_path is None:
        bundle_path = sources.bundle_path or os.path.join(sources.dist_dir or assets.PACKAGED_DIR, BUNDLE_NAME)
    lit_dir = lit_dir or lit_client_dir()
    copied = 0
    for dirpath, _, filenames in os.walk(lit_dir):
        rel = os.path.relpath(dirpath, lit_dir)
        for name in filenames:
            if rel == "static" and name == "index.html":
                continue
            copied += _copy_if_changed(os.path.join(dirpath, name), os.path.join(output_dir, rel, name))

    has_bundle = os.path.isfile(bundle_path)
    if (has_bundle and sources.origin == "checkout" and bundle_path == sources.bundle_path
            and not assets.bundle_is_current(os.path.dirname(sources.dist_dir))):
        logger.warning("%s is older than frontend/src: the page runs the modules as last built. Fix: `cd frontend"
                       " && npm run build` (or `make frontend`), then restart.", bundle_path)
    if has_bundle:
        copied += _copy_if_changed(bundle_path, os.path.join(output_dir, BUNDLE_NAME))
        if os.path.isfile(bundle_path + ".map"):
            copied += _copy_if_changed(bundle_path + ".map", os.path.join(output_dir, BUNDLE_NAME + ".map"))
    else:
        fix = ("Build it with `cd frontend && npm run build` (or `make frontend`)." if sources.origin == "checkout"
               else "This installation lacks its package data: reinstall the sequence-salience wheel.")
        logger.warning("Sequence Salience bundle not found at %s: serving LIT's UI without the salience"
                       " module. %s", bundle_path, fix)
        stale = os.path.join(output_dir, BUNDLE_NAME)
        if os.path.exists(stale):
            os.remove(stale)

    fonts_out = os.path.join(output_dir, FONTS_DIR)
    has_fonts = True
    if node_modules is None and sources.fonts_dir is not None:
        for name in sorted(os.listdir(sources.fonts_dir)):  # gathered at packaging time, fonts.css included
            copied += _copy_if_changed(os.path.join(sources.fonts_dir, name), os.path.join(fonts_out, name))
    else:
        try:
            css, font_files = assets.font_faces(node_modules or sources.node_modules or "")
        except FileNotFoundError as e:
            has_fonts = False
            logger.warning("Font package file %s not found: icons and fonts will not render offline."
                           " Install the frontend packages with `cd frontend && npm ci`.", e)
        if has_fonts:
            for name, src in font_files.items():
                copied += _copy_if_changed(src, os.path.join(fonts_out, name))
            copied += _write_if_changed(os.path.join(fonts_out, FONTS_CSS), css)

    guard = os.path.join(output_dir, request_guard.REQUEST_GUARD_NAME)
    try:
        copied += _write_if_changed(guard, request_guard.request_guard_js())
    except FileNotFoundError as e:  # the server-side still works; LIT's page gets 403s until it is built
        logger.warning("%s Until then LIT's page is refused its POSTs (403).", e)
        if os.path.exists(guard):
            os.remove(guard)
    with open(os.path.join(lit_dir, "static", "index.html"), encoding="utf-8") as f:
        html = rewrite_index_html(f.read(), has_bundle=has_bundle, has_fonts=has_fonts)
    copied += _write_if_changed(os.path.join(output_dir, "static", "index.html"), html)
    logger.info("Client root %s ready (%d file(s) updated; our files from the %s).", output_dir, copied,
                sources.origin)
    return output_dir
