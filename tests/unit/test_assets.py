"""lit_app/serving/assets.py: which browser files a checkout or an installed wheel serves, and the packaging step.

Fake source trees in tmp_path stand in for a checkout (frontend/ with dist/ and the npm font
packages) and for an installed package (lit_app/dist/ gathered); no npm runs here (the real
build is tests/e2e/test_plugin_wheel.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from lit_app.serving import assets, client_build

FONT_CSS = """@font-face { font-family: '{family}'; src: url(./files/{stem}.woff2) format('woff2'),
 url(./files/{stem}.woff) format('woff'); }"""


def _fake_checkout(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname='x'\n")
    fe = root / "frontend"
    (fe / "src").mkdir(parents=True)
    (fe / "src" / "index.ts").write_text("export {};\n")
    (fe / "package.json").write_text("{}")
    (fe / "package-lock.json").write_text("{}")
    (fe / "dist").mkdir()
    (fe / "dist" / "sequence_salience.js").write_text("console.log('bundle');\n")
    (fe / "dist" / "sequence_salience.js.map").write_text("{}")
    (fe / "dist" / "notes.txt").write_text("not a script")
    nm = fe / "node_modules"
    for family, css_rel, source_family in assets.FONT_SOURCES:
        css = nm / css_rel
        css.parent.mkdir(parents=True, exist_ok=True)
        stem = source_family.lower().replace(" ", "-") + "-" + css.stem
        (css.parent / "files").mkdir(exist_ok=True)
        for ext in ("woff2", "woff"):
            (css.parent / "files" / f"{stem}.{ext}").write_bytes(b"font " + stem.encode())
        css.write_text(FONT_CSS.replace("{family}", source_family).replace("{stem}", stem))
    return root


def test_gather_writes_scripts_fonts_and_a_manifest_last(tmp_path):
    root = _fake_checkout(tmp_path / "repo")
    out = tmp_path / "out"
    files = assets.gather(str(out), str(root / "frontend" / "dist"), str(root / "frontend" / "node_modules"))
    assert "sequence_salience.js" in files and "sequence_salience.js.map" in files and "notes.txt" not in files
    assert (out / "sequence_salience.js").read_text() == "console.log('bundle');\n"
    css = (out / "fonts" / "fonts.css").read_text()
    # LIT's family names are declared, pointing at files next to the css.
    for family in ("Roboto", "Google Sans", "Roboto Mono", "Share Tech Mono", "Material Icons"):
        assert f"font-family: '{family}';" in css
    assert 'url("material-icons-filled.woff2")' in css and (out / "fonts" / "material-icons-filled.woff2").is_file()
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert sorted(manifest["files"]) == sorted(f for f in files if f != "MANIFEST.json")
    assert assets.is_gathered(str(out))
    os.remove(out / "fonts" / "fonts.css")
    assert not assets.is_gathered(str(out))


def test_gather_without_the_bundle_names_the_fix(tmp_path):
    root = _fake_checkout(tmp_path / "repo")
    os.remove(root / "frontend" / "dist" / "sequence_salience.js")
    with pytest.raises(assets.AssetError, match="npm run build"):
        assets.gather(str(tmp_path / "out"), str(root / "frontend" / "dist"), str(root / "frontend" / "node_modules"))


def test_find_prefers_the_checkout_and_else_the_package_data(tmp_path):
    root = _fake_checkout(tmp_path / "repo")
    src = assets.find(str(root), str(root / "lit_app" / "dist"))
    assert src.origin == "checkout" and src.bundle_path == str(root / "frontend" / "dist" / "sequence_salience.js")
    assert src.node_modules == str(root / "frontend" / "node_modules") and src.fonts_dir is None

    site = tmp_path / "site-packages"
    packaged = site / "lit_app" / "dist"
    assets.gather(str(packaged), str(root / "frontend" / "dist"), str(root / "frontend" / "node_modules"))
    src = assets.find(str(site), str(packaged))
    assert src.origin == "package" and src.bundle_path == str(packaged / "sequence_salience.js")
    assert src.fonts_dir == str(packaged / "fonts") and src.node_modules is None
    # An installation without its package data: no bundle, no fonts (the server then warns).
    empty = assets.find(str(tmp_path / "bare"), str(tmp_path / "bare" / "lit_app" / "dist"))
    assert empty.bundle_path is None and empty.fonts_dir is None


def test_prepare_reuses_a_gathered_folder_and_refuses_a_tree_without_sources(tmp_path):
    root = _fake_checkout(tmp_path / "repo")
    sdist = tmp_path / "sdist"
    assets.gather(str(sdist / "lit_app" / "dist"), str(root / "frontend" / "dist"),
                  str(root / "frontend" / "node_modules"))
    out = tmp_path / "build" / "lit_app" / "dist"
    files = assets.prepare(str(out), repo_root=str(sdist), log=lambda m: None)  # no frontend/: no npm
    assert "MANIFEST.json" in files and assets.is_gathered(str(out))
    with pytest.raises(assets.AssetError, match="no browser modules to package"):
        assets.prepare(str(tmp_path / "o2"), repo_root=str(tmp_path / "nothing"), log=lambda m: None)


def test_bundle_is_current_follows_the_sources(tmp_path):
    fe = _fake_checkout(tmp_path / "repo") / "frontend"
    old = time.time() - 100
    for p in (fe / "src" / "index.ts", fe / "package.json", fe / "package-lock.json"):
        os.utime(p, (old, old))
    assert assets.bundle_is_current(str(fe))
    os.utime(fe / "src" / "index.ts", None)  # edited after the last build
    os.utime(fe / "dist" / "sequence_salience.js", (old, old))
    assert not assets.bundle_is_current(str(fe))


def test_client_root_from_a_stale_checkout_bundle_says_so(tmp_path, monkeypatch, caplog):
    """A bundle older than frontend/src is served (the page works) with a warning naming the rebuild."""
    fe = _fake_checkout(tmp_path / "repo") / "frontend"
    sources = assets.Sources(str(fe / "dist"), str(fe / "node_modules"), None, "checkout")
    monkeypatch.setattr(assets, "find", lambda: sources)
    old = time.time() - 100
    for p in (fe / "src" / "index.ts", fe / "package.json", fe / "package-lock.json"):
        os.utime(p, (old, old))
    with caplog.at_level("WARNING", logger=client_build.logger.name):
        client_build.build_client_root(str(tmp_path / "fresh"))
    assert not [r for r in caplog.records if "older than frontend/src" in r.getMessage()]
    os.utime(fe / "src" / "index.ts", None)  # edited after the last build
    os.utime(fe / "dist" / "sequence_salience.js", (old, old))
    with caplog.at_level("WARNING", logger=client_build.logger.name):
        out = Path(client_build.build_client_root(str(tmp_path / "stale")))
    assert (out / "sequence_salience.js").is_file()
    warned = [r.getMessage() for r in caplog.records if "older than frontend/src" in r.getMessage()]
    assert len(warned) == 1 and "npm run build" in warned[0], warned


def test_client_root_from_package_data(tmp_path, monkeypatch):
    """An installed wheel: the bundle and the gathered fonts land in the client root, offline."""
    root = _fake_checkout(tmp_path / "repo")
    site = tmp_path / "site-packages"
    packaged = site / "lit_app" / "dist"
    assets.gather(str(packaged), str(root / "frontend" / "dist"), str(root / "frontend" / "node_modules"))
    monkeypatch.setattr(assets, "find", lambda: assets.Sources(str(packaged), None, str(packaged / "fonts"),
                                                                "package"))
    out = Path(client_build.build_client_root(str(tmp_path / "client_root")))
    assert (out / "sequence_salience.js").read_text() == "console.log('bundle');\n"
    assert (out / "fonts" / "fonts.css").read_text() == (packaged / "fonts" / "fonts.css").read_text()
    assert (out / "fonts" / "material-icons-filled.woff2").is_file()
    html = (out / "static" / "index.html").read_text()
    assert '<script src="sequence_salience.js">' in html and 'href="fonts/fonts.css"' in html
    assert "https://" not in html.split("<body")[0]


def test_default_client_root_is_outside_an_installed_package(monkeypatch, tmp_path):
    monkeypatch.setattr(assets, "is_checkout", lambda *a: False)
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path / "cache"))
    assert client_build.client_root_dir() == str(tmp_path / "cache" / "client_root")
    monkeypatch.setattr(assets, "is_checkout", lambda *a: True)
    assert client_build.client_root_dir() == os.path.join(assets.PACKAGE_DIR, "client_root")
