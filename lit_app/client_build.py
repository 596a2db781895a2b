"""Builds the client root the LIT server serves: LIT's prebuilt UI, our bundle, local fonts.

Layout of the built folder (LIT's server serves `/` from `static/index.html`
and every other path relative to the folder):

    main.js, main.js.map, ...     LIT's prebuilt client (lit_nlp/client/build/default)
    static/index.html             LIT's page, rewritten: no internet links, our bundle added
    static/favicon.png, ...
    sequence_salience.js(.map)    our bundle (frontend/dist), when it has been built
    request_guard.js              fetch wrapper for the server's request rules (lit_app/security.py)
    fonts/fonts.css, fonts/*.woff2 Roboto, Roboto Mono, Material Icons (from npm packages)

The build is cheap to repeat: a file is copied only when its source's size or
mtime changed, and the rewritten index.html is written only when its text
changed. Nothing in the result points outside the machine.
"""

from __future__ import annotations

import logging
import os
import re
import shutil

from lit_app import security

logger = logging.getLogger(__name__)

_HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(_HERE)
DEFAULT_OUTPUT_DIR = os.path.join(_HERE, "client_root")
DEFAULT_BUNDLE_PATH = os.path.join(REPO_ROOT, "frontend", "dist", "sequence_salience.js")
DEFAULT_NODE_MODULES = os.path.join(REPO_ROOT, "frontend", "node_modules")
BUNDLE_NAME = "sequence_salience.js"
FONTS_DIR = "fonts"
FONTS_CSS = "fonts.css"

_MAIN_JS_TAG = re.compile(r'<script\s+src="main\.js"\s*>\s*</script>')
# LIT's index.html loads Google Fonts / Material Icons stylesheets from the internet.
_REMOTE_LINK = re.compile(r'[ \t]*<link\b[^>]*href="https?://[^"]*"[^>]*>[ \t]*\n?')

# (font-family used by LIT's CSS, npm css file relative to node_modules, family in that file)
# "Google Sans" and "Share Tech Mono" are not on npm; Roboto / Roboto Mono stand in.
_FONT_SOURCES = (
    ("Roboto", "@fontsource/roboto/latin-400.css", "Roboto"),
    ("Roboto", "@fontsource/roboto/latin-500.css", "Roboto"),
    ("Roboto", "@fontsource/roboto/latin-700.css", "Roboto"),
    ("Google Sans", "@fontsource/roboto/latin-400.css", "Roboto"),
    ("Google Sans", "@fontsource/roboto/latin-500.css", "Roboto"),
    ("Google Sans", "@fontsource/roboto/latin-700.css", "Roboto"),
    ("Roboto Mono", "@fontsource/roboto-mono/latin-400.css", "Roboto Mono"),
    ("Share Tech Mono", "@fontsource/roboto-mono/latin-400.css", "Roboto Mono"),
    ("Material Icons", "material-icons/iconfont/filled.css", "Material Icons"),
    ("Google Material Icons", "material-icons/iconfont/filled.css", "Material Icons"),
    ("Material Icons Outlined", "material-icons/iconfont/outlined.css", "Material Icons Outlined"),
)
_FONT_FACE = re.compile(r"@font-face\s*{[^}]*}")
_URL = re.compile(r"""url\(\s*["']?([^"')]+)["']?\s*\)""")


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
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp"
    shutil.copy2(src, tmp)  # keeps mtime, so the next build sees it unchanged
    os.replace(tmp, dst)
    return True


def _write_if_changed(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return True


def _font_faces(node_modules: str) -> tuple[str, dict[str, str]]:
    """Returns (fonts.css text, {file name in fonts/: source path})."""
    rules: list[str] = []
    files: dict[str, str] = {}
    for family, css_rel, source_family in _FONT_SOURCES:
        css_path = os.path.join(node_modules, css_rel)
        if not os.path.isfile(css_path):
            raise FileNotFoundError(css_path)
        with open(css_path, encoding="utf-8") as f:
            css = f.read()
        css_dir = os.path.dirname(css_path)
        for face in _FONT_FACE.findall(css):
            if source_family not in face:
                continue

            def _local(m: re.Match[str]) -> str:
                src = os.path.normpath(os.path.join(css_dir, m.group(1)))
                name = os.path.basename(src)
                files[name] = src
                return f'url("{name}")'

            face = _URL.sub(_local, face)
            face = re.sub(r"font-family:\s*[^;]+;", f"font-family: '{family}';", face, count=1)
            rules.append(face)
    # LIT styles icons with these classes too (Material Icons' own CSS does the same).
    rules.append(
        ".material-icons { font-family: 'Material Icons'; font-weight: normal;"
        " font-style: normal; font-size: 24px; line-height: 1; letter-spacing: normal;"
        " text-transform: none; display: inline-block; white-space: nowrap;"
        " word-wrap: normal; direction: ltr; font-feature-settings: 'liga';"
        " -webkit-font-smoothing: antialiased; }"
    )
    header = "/* Generated by lit_app/client_build.py from npm font packages. */\n"
    return header + "\n".join(rules) + "\n", files


def rewrite_index_html(html: str, has_bundle: bool, has_fonts: bool) -> str:
    """LIT's index.html with remote font links replaced by local ones, the request guard and our bundle added."""
    html = _REMOTE_LINK.sub("", html)
    # The request guard (lit_app/security.py) must wrap fetch before LIT's main.js runs.
    html = _MAIN_JS_TAG.sub(lambda m: f'<script src="{security.REQUEST_GUARD_NAME}"></script>\n  ' + m.group(0),
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
    output_dir: str = DEFAULT_OUTPUT_DIR,
    bundle_path: str = DEFAULT_BUNDLE_PATH,
    node_modules: str = DEFAULT_NODE_MODULES,
    lit_dir: str | None = None,
) -> str:
    """Builds (or refreshes) the client root folder and returns its path.

    Missing pieces degrade with a warning rather than an error: without the
    bundle the page is LIT's plain UI; without the npm font packages icons
    fall back to text.
    """
    lit_dir = lit_dir or lit_client_dir()
    copied = 0
    for dirpath, _, filenames in os.walk(lit_dir):
        rel = os.path.relpath(dirpath, lit_dir)
        for name in filenames:
            if rel == "static" and name == "index.html":
                continue
            copied += _copy_if_changed(os.path.join(dirpath, name), os.path.join(output_dir, rel, name))

    has_bundle = os.path.isfile(bundle_path)
    if has_bundle:
        copied += _copy_if_changed(bundle_path, os.path.join(output_dir, BUNDLE_NAME))
        if os.path.isfile(bundle_path + ".map"):
            copied += _copy_if_changed(bundle_path + ".map", os.path.join(output_dir, BUNDLE_NAME + ".map"))
    else:
        logger.warning(
            "Sequence Salience bundle not found at %s: serving LIT's UI without the salience"
            " module. Build it with `cd frontend && npm run build` (or `make frontend`).",
            bundle_path,
        )
        stale = os.path.join(output_dir, BUNDLE_NAME)
        if os.path.exists(stale):
            os.remove(stale)

    has_fonts = True
    try:
        css, font_files = _font_faces(node_modules)
    except FileNotFoundError as e:
        has_fonts = False
        logger.warning(
            "Font package file %s not found: icons and fonts will not render offline."
            " Install the frontend packages with `cd frontend && npm ci`.", e,
        )
    if has_fonts:
        fonts_out = os.path.join(output_dir, FONTS_DIR)
        for name, src in font_files.items():
            copied += _copy_if_changed(src, os.path.join(fonts_out, name))
        copied += _write_if_changed(os.path.join(fonts_out, FONTS_CSS), css)

    copied += _write_if_changed(os.path.join(output_dir, security.REQUEST_GUARD_NAME), security.REQUEST_GUARD_JS)
    with open(os.path.join(lit_dir, "static", "index.html"), encoding="utf-8") as f:
        html = rewrite_index_html(f.read(), has_bundle=has_bundle, has_fonts=has_fonts)
    copied += _write_if_changed(os.path.join(output_dir, "static", "index.html"), html)
    logger.info("Client root %s ready (%d file(s) updated).", output_dir, copied)
    return output_dir
