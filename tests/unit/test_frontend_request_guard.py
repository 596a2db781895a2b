"""The request guard the client root serves is the TypeScript source built by `npm run build`
(frontend/src/request_guard.ts -> frontend/dist/request_guard.js), read from where lit_app.serving.assets
finds the built files; without a build the error names the file and the fix."""

from __future__ import annotations

import os

import pytest

from lit_app.serving import assets, client_build, request_guard


def test_the_served_guard_is_the_built_typescript():
    sources = assets.find()
    built = os.path.join(sources.dist_dir, request_guard.REQUEST_GUARD_NAME)
    assert sources.origin == "checkout" and os.path.isfile(built), "build it: cd frontend && npm run build"
    with open(built, encoding="utf-8") as f:
        text = f.read()
    assert request_guard.request_guard_js() == text == request_guard.REQUEST_GUARD_JS
    # esbuild's output of src/request_guard.ts (its module comment), not a second copy in Python.
    assert "// src/request_guard.ts" in text and "__ssRequestGuard" in text


def test_an_unbuilt_guard_names_the_file_and_the_fix(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(assets, "find", lambda: assets.Sources(str(tmp_path), None, None, "checkout"))
    with pytest.raises(FileNotFoundError, match=r"request_guard\.js is not built.*npm run build"):
        request_guard.request_guard_js()
    with pytest.raises(AttributeError):
        request_guard.NO_SUCH_NAME  # noqa: B018
    # The client root still builds (the server side works), says why the page will fail, and keeps no stale guard.
    out = tmp_path / "root"
    (out).mkdir()
    (out / request_guard.REQUEST_GUARD_NAME).write_text("stale")
    client_build.build_client_root(str(out), bundle_path=str(tmp_path / "none.js"))
    assert not (out / request_guard.REQUEST_GUARD_NAME).exists()
    assert "is not built" in caplog.text and "npm run build" in caplog.text
