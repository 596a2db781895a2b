"""The released package, not the checkout: `python -m build`, a new venv, the installed server, a browser.

The wheel must carry everything the page needs (our bundle, the local fonts) and find it
inside the installed package; the server must write its client root where the user can
write (the cache dir), not into site-packages; all three modules must render and the first
highlight appear for a shipped example, with the venv's interpreter, started from a folder
outside the checkout, with no PYTHONPATH and no npm involved.

Cost (2 cores shared with other jobs): building sdist + wheel about 15 s; the venv
(tests/wheel_venv.py) is cached per machine and requirement set: cold, 5.4 min at load 9 and
12 min at load 13 (torch, then the wheel's dependencies from the package index), plus one
conversion of the default model for that venv (about 1 min); warm, 4 s to reinstall the wheel.
Both tests together: 76 s warm at load 9.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests import wheel_venv
from tests.e2e import plugin_checks
from tests.server_process import REPO, ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def built_dist(tmp_path_factory) -> tuple[Path, Path]:
    return wheel_venv.build_dist(tmp_path_factory.mktemp("dist"))


def test_wheel_and_sdist_carry_the_built_modules(built_dist):
    sdist, wheel = built_dist
    bundle = (REPO / "frontend" / "dist" / "sequence_salience.js").read_bytes()
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert z.read("lit_app/dist/sequence_salience.js") == bundle, "the wheel's bundle is not frontend/dist's"
        manifest = json.loads(z.read("lit_app/dist/MANIFEST.json"))
        for rel in manifest["files"]:
            assert f"lit_app/dist/{rel}" in names, rel
        css = z.read("lit_app/dist/fonts/fonts.css").decode()
    for family in ("Roboto", "Roboto Mono", "Material Icons", "Google Sans"):
        assert f"font-family: '{family}'" in css, family
    assert "lit_app/dist/fonts/material-icons.woff2" in names
    assert "lit_app/data/case_studies.jsonl" in names and "lit_app/data/case_study_variants.jsonl" in names
    assert not any(n.startswith(("frontend/", "tests/", "lit_app/client_root")) for n in names)
    import tarfile
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    # The sdist carries the gathered files (a wheel from it needs no Node) and the TypeScript sources.
    assert {"lit_app/dist/MANIFEST.json", "lit_app/dist/sequence_salience.js", "frontend/package.json",
            "frontend/package-lock.json", "frontend/src/index.ts", "setup.py"} <= members
    assert not any(m.startswith("frontend/node_modules") for m in members)


def test_installed_wheel_serves_all_three_modules(built_dist, tmp_path, browser_page, artifacts_dir):
    _, wheel = built_dist
    venv, timings = wheel_venv.installed_venv(wheel)
    print(f"\nwheel {wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB; venv {venv}: {timings}")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    site = Path(wheel_venv.run_in(venv, ["python", "-c", "import lit_app, os; print(os.path.dirname(lit_app.__file__))"],
                                  outside).strip())
    assert site.is_relative_to(venv), f"lit_app imported from {site}, not from the venv"

    server = ServerProcess(["--max_new_tokens", "24"], tmp_path, own_client_root=False,
                           command=[str(venv / "bin" / "sequence-salience-server")], cwd=outside,
                           env=wheel_venv.clean_env(venv))
    with server:
        log = server.log_path.read_text()
        assert "our files from the package" in log, log[-2000:]
        assert not (site / "client_root").exists(), "the client root was written into site-packages"
        page, external = browser_page
        seen = plugin_checks.three_modules_and_first_highlight(page, server.url)
        page.screenshot(path=str(artifacts_dir / "plugin-wheel.png"))
        assert "Paris" in seen["response"], seen
        assert not external, f"the page reached outside the machine: {external[:5]}"
        loaded = page.evaluate("() => [...document.fonts].filter(f => f.status === 'loaded')"
                               ".map(f => f.family.replace(/[\"']/g, ''))")
        assert "Material Icons" in loaded, f"the packaged icon font did not load: {loaded}"
