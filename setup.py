"""Packaging step for the browser modules (everything else is in pyproject.toml).

`python -m build` (or `pip wheel .`) puts the built TypeScript bundle and the local fonts
into the package as `lit_app/dist/` (lit_app/serving/assets.py says what and from where):

* sdist: the release tree gets `lit_app/dist/` gathered from this checkout (running
  `npm ci` / `npm run build` in frontend/ when the bundle is missing or older than its
  sources), besides the TypeScript sources themselves (MANIFEST.in). A wheel built from
  that sdist needs no Node.
* wheel (build_py): copies an already gathered `lit_app/dist/` (an unpacked sdist), or
  gathers one from the checkout straight into the build folder. The checkout itself is
  never written to, except frontend/dist and frontend/node_modules by npm.
"""

import importlib.util
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))


def _assets():
    """lit_app/serving/assets.py, loaded by path (standard library only; lit_app's dependencies are not installed here)."""
    spec = importlib.util.spec_from_file_location("_ss_assets", os.path.join(HERE, "lit_app", "serving", "assets.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class BuildPyWithAssets(build_py):
    """build_py, then the browser files into <build_lib>/lit_app/dist."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads frontend/ from the checkout (lit_app/serving/assets.py `find`)
        assets = _assets()
        out = os.path.join(self.build_lib, "lit_app", assets.PACKAGED_SUBDIR)
        assets.prepare(out, repo_root=HERE, log=self.announce_info)

    def announce_info(self, message):
        self.announce(message, level=2)  # distutils.log.INFO


class SdistWithAssets(sdist):
    """sdist whose release tree carries the gathered browser files (a wheel from it needs no Node)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        assets = _assets()
        assets.prepare(os.path.join(base_dir, "lit_app", assets.PACKAGED_SUBDIR), repo_root=HERE,
                       log=lambda m: self.announce(m, level=2))


setup(cmdclass={"build_py": BuildPyWithAssets, "sdist": SdistWithAssets})
