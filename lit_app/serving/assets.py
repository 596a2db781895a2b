"""The browser files our LIT modules need, and where they come from: a checkout or the installed package.

Standard library only: `setup.py` runs this at packaging time, in an isolated build
environment that has neither LIT nor werkzeug.

    frontend/dist/*.js(.map)             our bundle, built by `npm run build` (esbuild)
    frontend/node_modules/<font pkgs>    Roboto, Roboto Mono, Material Icons (npm)

are gathered into one folder, the *asset folder*:

    sequence_salience.js(.map)           the bundle (and any other built script, e.g. a request guard)
    fonts/fonts.css, fonts/*.woff(2)     the local fonts, with LIT's font-family names
    MANIFEST.json                        {"files": [...], "bundle_sha256": ...}: written last

The wheel carries it as package data (`lit_app/dist/`); `lit_app/serving/client_build.py` copies it,
with LIT's installed client, into the client root the server serves. In a checkout the
sources are read directly (`find()`), so `npm run build` shows up on the next server start
without repackaging.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # lit_app/
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
FRONTEND_DIR = os.path.join(REPO_ROOT, "frontend")
# Where the wheel carries the gathered assets (package data of lit_app).
PACKAGED_DIR = os.path.join(PACKAGE_DIR, "dist")
PACKAGED_SUBDIR = "dist"
BUNDLE_NAME = "sequence_salience.js"
FONTS_DIR = "fonts"
FONTS_CSS = "fonts.css"
MANIFEST = "MANIFEST.json"

# (font-family used by LIT's CSS, npm css file relative to node_modules, family in that file)
# "Google Sans" and "Share Tech Mono" are not on npm; Roboto / Roboto Mono stand in.
FONT_SOURCES = (
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
# Built scripts taken from frontend/dist (the bundle, its map, any other entry point such as a request guard).
_BUILT = re.compile(r"^[A-Za-z0-9_.-]+\.js(\.map)?$")


class AssetError(RuntimeError):
    """A packaging step cannot produce the browser files (message: the cause and the fix)."""


@dataclasses.dataclass(frozen=True)
class Sources:
    """Where the client root's own files come from.

    dist_dir: folder with the bundle (and other built scripts); None when none was found.
    node_modules: npm packages with the fonts (a checkout), or None.
    fonts_dir: a gathered fonts/ folder (fonts.css + files; the installed package), or None.
    origin: "checkout" or "package" (for log lines).
    """

    dist_dir: str | None
    node_modules: str | None
    fonts_dir: str | None
    origin: str

    @property
    def bundle_path(self) -> str | None:
        if self.dist_dir is None:
            return None
        path = os.path.join(self.dist_dir, BUNDLE_NAME)
        return path if os.path.isfile(path) else None


def is_checkout(repo_root: str = REPO_ROOT) -> bool:
    """True when lit_app sits in a source tree with the TypeScript sources (not an installed wheel)."""
    return os.path.isfile(os.path.join(repo_root, "frontend", "package.json")) and os.path.isfile(
        os.path.join(repo_root, "pyproject.toml"))


def find(repo_root: str = REPO_ROOT, packaged_dir: str = PACKAGED_DIR) -> Sources:
    """The sources for this installation: the checkout's frontend/ if there is one, else the package data."""
    if is_checkout(repo_root):
        frontend = os.path.join(repo_root, "frontend")
        return Sources(os.path.join(frontend, "dist"), os.path.join(frontend, "node_modules"), None, "checkout")
    fonts = os.path.join(packaged_dir, FONTS_DIR)
    return Sources(packaged_dir if os.path.isdir(packaged_dir) else None, None,
                   fonts if os.path.isfile(os.path.join(fonts, FONTS_CSS)) else None, "package")


def font_faces(node_modules: str) -> tuple[str, dict[str, str]]:
    """(fonts.css text, {file name in fonts/: source path}) from the npm font packages.

    Raises FileNotFoundError naming the first missing package file.
    """
    rules: list[str] = []
    files: dict[str, str] = {}
    for family, css_rel, source_family in FONT_SOURCES:
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
    header = "/* Generated by lit_app/serving/assets.py from npm font packages. */\n"
    return header + "\n".join(rules) + "\n", files


def built_scripts(dist_dir: str) -> list[str]:
    """Names of the built scripts (and their maps) in frontend/dist, sorted."""
    if not os.path.isdir(dist_dir):
        return []
    return sorted(n for n in os.listdir(dist_dir) if _BUILT.match(n) and os.path.isfile(os.path.join(dist_dir, n)))


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gather(out_dir: str, dist_dir: str, node_modules: str, with_maps: bool = True) -> list[str]:
    """Writes the asset folder (module docstring) into `out_dir`; returns its files, relative.

    The manifest is written last, so a folder with a MANIFEST.json is complete.
    """
    bundle = os.path.join(dist_dir, BUNDLE_NAME)
    if not os.path.isfile(bundle):
        raise AssetError(f"{bundle} is missing. Fix: build it with `cd frontend && npm ci && npm run build`.")
    try:
        css, font_files = font_faces(node_modules)
    except FileNotFoundError as e:
        raise AssetError(f"Font package file {e} is missing. Fix: `cd frontend && npm ci`.") from None
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(os.path.join(out_dir, FONTS_DIR))
    written = []
    for name in built_scripts(dist_dir):
        if name.endswith(".map") and not with_maps:
            continue
        shutil.copyfile(os.path.join(dist_dir, name), os.path.join(out_dir, name))
        written.append(name)
    for name, src in sorted(font_files.items()):
        shutil.copyfile(src, os.path.join(out_dir, FONTS_DIR, name))
        written.append(f"{FONTS_DIR}/{name}")
    with open(os.path.join(out_dir, FONTS_DIR, FONTS_CSS), "w", encoding="utf-8") as f:
        f.write(css)
    written.append(f"{FONTS_DIR}/{FONTS_CSS}")
    manifest = {"files": written, "bundle_sha256": _sha256(bundle)}
    with open(os.path.join(out_dir, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    return written + [MANIFEST]


def is_gathered(folder: str) -> bool:
    """True when `folder` is a complete asset folder (its manifest exists and names only present files)."""
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
            files = json.load(f)["files"]
    except (OSError, ValueError, KeyError):
        return False
    return all(os.path.isfile(os.path.join(folder, rel)) for rel in files)


def _newest_mtime(paths: list[str]) -> float:
    newest = 0.0
    for top in paths:
        if os.path.isfile(top):
            newest = max(newest, os.path.getmtime(top))
        for dirpath, _, names in os.walk(top):
            for name in names:
                newest = max(newest, os.path.getmtime(os.path.join(dirpath, name)))
    return newest


def bundle_is_current(frontend_dir: str) -> bool:
    """True when frontend/dist's bundle is newer than every TypeScript source and the package files."""
    bundle = os.path.join(frontend_dir, "dist", BUNDLE_NAME)
    if not os.path.isfile(bundle):
        return False
    sources = [os.path.join(frontend_dir, p) for p in ("src", "package.json", "package-lock.json")]
    return os.path.getmtime(bundle) >= _newest_mtime(sources)


def build_frontend(frontend_dir: str = FRONTEND_DIR, log=print) -> None:
    """`npm ci` when node_modules is missing, `npm run build` when the bundle is missing or older than its sources."""
    node_modules = os.path.join(frontend_dir, "node_modules")
    npm = shutil.which("npm")

    def run(*args: str) -> None:
        if npm is None:
            raise AssetError(
                f"Building the browser modules needs npm (Node 20), which is not on PATH. Fix: install Node 20,"
                f" or build the wheel from the sdist (`python -m build` makes both; the sdist carries the"
                f" built files).")
        log(f"lit_app/serving/assets.py: running npm {' '.join(args)} in {frontend_dir}")
        done = subprocess.run([npm, *args], cwd=frontend_dir, check=False)
        if done.returncode != 0:
            raise AssetError(f"`npm {' '.join(args)}` failed in {frontend_dir} (exit code {done.returncode});"
                             " its output is above.")

    if not os.path.isdir(os.path.join(node_modules, "esbuild")):
        run("ci", "--no-audit", "--no-fund")
    if not bundle_is_current(frontend_dir):
        run("run", "build")


def prepare(out_dir: str, repo_root: str = REPO_ROOT, log=print) -> list[str]:
    """The packaging step: the asset folder in `out_dir`, from a checkout (building the bundle when needed)
    or from an already gathered folder (an unpacked sdist carries `lit_app/dist/`)."""
    packaged = os.path.join(repo_root, "lit_app", PACKAGED_SUBDIR)
    if is_gathered(packaged):
        if os.path.abspath(packaged) != os.path.abspath(out_dir):
            if os.path.isdir(out_dir):
                shutil.rmtree(out_dir)
            shutil.copytree(packaged, out_dir)
        log(f"lit_app/serving/assets.py: using the browser files already gathered in {packaged}")
        with open(os.path.join(out_dir, MANIFEST), encoding="utf-8") as f:
            return json.load(f)["files"] + [MANIFEST]
    frontend = os.path.join(repo_root, "frontend")
    if not os.path.isfile(os.path.join(frontend, "package.json")):
        raise AssetError(f"Neither {packaged}/{MANIFEST} nor {frontend}/package.json exists: this source tree"
                         " has no browser modules to package. Fix: build from a git checkout or from the sdist.")
    build_frontend(frontend, log=log)
    files = gather(out_dir, os.path.join(frontend, "dist"), os.path.join(frontend, "node_modules"))
    log(f"lit_app/serving/assets.py: gathered {len(files)} browser file(s) into {out_dir}")
    return files
