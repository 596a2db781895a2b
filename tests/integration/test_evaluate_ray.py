"""`evaluate --ray` on a local Ray instance (2 CPU workers, loopback): the same per-row results as
the serial run, and a worker that dies loses only its row, which is retried.

Plumbing tests on a tiny random model saved as an HF folder (each worker loads it). Skipped
only when Ray is not installed (`make test` installs the [ray] extra).
"""

from __future__ import annotations

import json
import os

import pytest

ray = pytest.importorskip("ray")

from sequence_salience import cli  # noqa: E402
from sequence_salience.evaluate import EvalConfig, ModelSpec, RowWorker, run_ray, run_serial  # noqa: E402
from sequence_salience.evaluate import runner  # noqa: E402
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
CONFIG = EvalConfig(faithfulness=FaithfulnessConfig(granularity="word", steps=4, n_random=3), max_new_tokens=4)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance (2 CPUs, loopback) for the module; run_ray reuses it and leaves it up."""
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


def test_local_ray_gives_the_serial_per_row_results(local_ray, tiny_dir, serial, tmp_path, capsys):
    batch = tmp_path / "p.jsonl"
    batch.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    base = ["evaluate", "--batch", str(batch), "--model", tiny_dir, "--out", str(tmp_path / "ray")] + FLAGS
    assert cli.main(base + ["--ray", "--workers", "2"]) == cli.EXIT_OK
    assert "2 Ray worker(s) ready" in capsys.readouterr().err
    workers = set()
    for i in range(1, 5):
        on_ray = json.loads((tmp_path / "ray" / f"{i:05d}.json").read_text())
        assert on_ray["evaluation"] == serial[i], f"row {i}"  # exactly equal numbers
        workers.add(on_ray["meta"]["worker"])
    assert len(workers) == 2 and str(os.getpid()) not in {w.split("@")[0] for w in workers}
    # A serial rerun over the Ray run's folder resumes (same fingerprints): nothing to do, no model load.
    assert cli.main(base) == cli.EXIT_OK
    err = capsys.readouterr().err
    assert "0 to do, 4 already done" in err and "Loading model" not in err


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
