"""`evaluate --ray` on a local Ray instance (2 CPU workers, loopback): the same per-row results as
the serial run, a worker that dies loses only its row, which is retried, and every socket the
instance listens on is on loopback (the CLI run in a child process, its process tree watched).

Plumbing tests on a tiny random model saved as an HF folder (each worker loads it). Skipped
only when Ray is not installed (`make test` installs the [ray] extra).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from sequence_salience.evaluate import runner

# This process imports ray here, so it sets Ray's single-node switch first (as runner.connect does
# for a process that has not imported ray yet): the in-process instance below is loopback-only too.
os.environ.update(runner.LOOPBACK_ENV)
ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from sequence_salience import cli  # noqa: E402
from sequence_salience.evaluate import EvalConfig, ModelSpec, RowWorker, run_ray, run_serial  # noqa: E402
from sequence_salience.explain import FaithfulnessConfig  # noqa: E402
from tests import ray_workers  # noqa: E402
from tests.unit import tiny_models  # noqa: E402

ROWS = [
    {"prompt": "The capital of France is Paris. The capital of Italy is Rome.", "target": " Rome."},
    {"prompt": "Alice has three apples and Bob has two apples; together they have five.", "target": " five"},
    {"prompt": "Q: What is 2 + 3? A: 5. Q: What is 7 - 4?", "target": " A: 3."},
    {"prompt": "Sentences end with periods. Paragraphs are separated by blank lines."},
]
FLAGS = ["--granularity", "word", "--steps", "4", "--n-random", "3", "--max-new-tokens", "4", "--n-boot", "200"]
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = EvalConfig(faithfulness=FaithfulnessConfig(granularity="word", steps=4, n_random=3), max_new_tokens=4)


@pytest.fixture
def local_ray():
    """A local Ray instance (2 CPUs, loopback) for the test that uses it; run_ray reuses it and leaves it up. It is shut
    down when that test ends: its daemons would idle on (polling) through the CLI's run and its own instance."""
    started = runner.connect(None, 2, log=lambda _m: None)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    return tiny_models.save_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="module")
def serial(tiny_dir) -> dict:
    """line -> the serial run's evaluation (this process, one model load)."""
    worker = RowWorker(ModelSpec(tiny_dir), CONFIG)
    return {o.key: o.evaluation for o in run_serial(list(enumerate(ROWS, start=1)), worker)}


def test_a_worker_that_dies_loses_only_its_row_which_is_retried(local_ray, tiny_dir, serial, tmp_path):
    marker = str(tmp_path / "died")
    tasks = list(enumerate(ROWS, start=1))
    logs: list[str] = []
    out = list(run_ray(tasks, ModelSpec(tiny_dir), CONFIG, num_workers=2, worker_cls=ray_workers.DyingWorker,
                       worker_args=(2, marker), log=logs.append))
    assert os.path.exists(marker)  # the worker did die on row 2
    assert sorted(o.key for o in out) == [1, 2, 3, 4]  # every row exactly once
    attempts = {o.key: o.attempts for o in out}
    assert attempts == {1: 1, 2: 2, 3: 1, 4: 1}
    assert any("worker died on row 2 (attempt 1)" in m for m in logs)
    dead = open(marker, encoding="utf-8").read()
    assert next(o for o in out if o.key == 2).worker != dead  # retried on a live actor
    assert all(o.error is None and o.evaluation == serial[o.key] for o in out)


def _listening(procs) -> dict[tuple[int, str], set[str]]:
    """(pid, name) -> the local addresses "ip:port" its TCP sockets listen on and its UDP sockets are bound to.

    One read of the kernel's socket tables for all of `procs` (psutil.net_connections: every socket with the pid
    whose fd holds it): `Process.net_connections` reads the whole tables again for each process, ~7 ms a process
    on a loaded machine, 80 ms a poll of the Ray tree's 12 processes against 24 ms (docs/benchmarks.md, "Session
    41 (h3)")."""
    names: dict[int, str] = {}
    for p in procs:
        try:
            names[p.pid] = p.name()
        except psutil.Error:  # ended meanwhile
            continue
    out: dict[tuple[int, str], set[str]] = {}
    for c in psutil.net_connections(kind="inet"):
        if c.pid in names and (c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr)):
            out.setdefault((c.pid, names[c.pid]), set()).add(f"{c.laddr.ip}:{c.laddr.port}")
    return out


def test_every_socket_is_on_loopback_and_the_rows_are_the_serial_ones(tiny_dir, serial, tmp_path, capsys):
    """`evaluate --ray --workers 2` in a fresh process (ray not imported before: the CLI's own path, the switch not
    inherited from this test), its whole process tree (driver, GCS, raylet, agents, workers) polled while it runs:
    every listening socket seen is on 127.0.0.1 / ::1 (IPv4-mapped included). Before the fix, GCS, raylet, driver
    and workers listened on `*` and the runtime-env agent on the network address. The same run gives the serial
    run's per-row results, from two workers that are not the driver, and a serial rerun over its folder resumes.
    (One run for both claims: each worker costs a Python start that imports torch and loads the model.)"""
    batch = tmp_path / "p.jsonl"
    batch.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in runner.LOOPBACK_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "sequence_salience.cli", "evaluate", "--batch", str(batch), "--model", tiny_dir,
           "--out", str(tmp_path / "out"), "--ray", "--workers", "2"] + FLAGS
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[tuple[int, str], set[str]] = {}
    driver = psutil.Process(proc.pid)
    driver_name = driver.name()
    try:
        while proc.poll() is None:
            try:
                tree = [driver] + driver.children(recursive=True)
            except psutil.Error:
                break
            for key, addrs in _listening(tree).items():
                seen.setdefault(key, set()).update(addrs)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == cli.EXIT_OK, err
    assert "2 Ray worker(s) ready" in err
    assert f"Ray {ray.__version__}, listening on 127.0.0.1 only" in err  # the version and the path it took
    names = {name for _, name in seen}
    print("listening sockets seen:", {f"{name}[{pid}]": sorted(a) for (pid, name), a in sorted(seen.items())})
    # The processes that listen (seen before the fix on * / the network address) were all watched.
    assert {"gcs_server", "raylet"} <= names, names
    assert (proc.pid, driver_name) in seen  # the driver's own gRPC server
    assert sum(1 for n in names if n.startswith("ray::") and "Agent" not in n) >= 1, names  # the workers
    exposed = {f"{name}[{pid}]": sorted(a for a in addrs if not runner.is_loopback(a.rsplit(":", 1)[0]))
               for (pid, name), addrs in seen.items()}
    assert not any(exposed.values()), exposed
    workers = set()
    for i in range(1, 5):
        on_ray = json.loads((tmp_path / "out" / f"{i:05d}.json").read_text())
        assert on_ray["evaluation"] == serial[i], f"row {i}"  # exactly equal numbers
        workers.add(on_ray["meta"]["worker"])
    assert len(workers) == 2 and str(proc.pid) not in {w.split("@")[0] for w in workers}
    # A serial rerun over the Ray run's folder resumes (same fingerprints): nothing to do, no model load.
    base = ["evaluate", "--batch", str(batch), "--model", tiny_dir, "--out", str(tmp_path / "out")] + FLAGS
    assert cli.main(base) == cli.EXIT_OK
    err = capsys.readouterr().err
    assert "0 to do, 4 already done" in err and "Loading model" not in err
    assert runner.is_loopback("127.0.0.1") and runner.is_loopback("::1") and runner.is_loopback("::ffff:127.0.0.1")
    assert not runner.is_loopback("0.0.0.0") and not runner.is_loopback("::") and not runner.is_loopback("192.0.2.2")


def test_the_supported_ray_range_is_declared_once_and_holds_for_the_installed_ray():
    """pyproject's [ray] extra is runner.SUPPORTED_RAY; the installed Ray is in it; others are refused with the fix."""
    import tomllib  # pylint: disable=import-outside-toplevel

    from sequence_salience import SalienceError  # pylint: disable=import-outside-toplevel

    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["ray"]
    assert extra == [f"ray{runner.SUPPORTED_RAY}"]
    runner.check_ray_version(ray.__version__)  # the installed one: no error
    for version in ("2.8.1", "3.0.0", "not-a-version"):
        with pytest.raises(SalienceError, match=f"Ray {version} is installed.*Fix: pip install"):
            runner.check_ray_version(version)
