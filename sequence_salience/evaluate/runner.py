"""Running rows: one process (serial), or Ray actors (one model load per actor, rows scheduled dynamically).

Both runners take tasks (key, row) and yield an Outcome per task as it finishes, so the
caller (the driver) writes every result itself, in one place, with one resume rule.

* `run_serial(tasks, worker)`: rows in order on one RowWorker.
* `run_ray(tasks, spec, config, ...)`: `num_workers` actors, each loads the model once
  (RowWorker in its own process; `gpus_per_worker` GPUs each, which Ray assigns by
  CUDA_VISIBLE_DEVICES). Every idle actor gets the next row as soon as it is free (dynamic
  scheduling: a slow row never holds up the others). A row that raises (SalienceError, or
  any other exception such as running out of memory) is a failed row (reported, not retried). A worker that dies (process killed, node lost, out of
  memory) loses only the row it was running: a fresh actor replaces it and the row goes back
  to the front of the queue, up to `max_attempts` times in all.

Ray is optional (`pip install sequence-salience[ray]`, SUPPORTED_RAY); it is imported only by
connect / run_ray.

A local instance (no address) listens on loopback only: `connect` sets Ray's single-node switch
(LOOPBACK_ENV) before this process first imports ray, so Ray takes 127.0.0.1 as the node's address
(as it does on macOS and Windows) and binds every server of the node to it: GCS, raylet and
object manager, each worker's and the driver's gRPC server, the runtime-env agent. It checks the
address Ray will use before starting anything and refuses (SalienceError) when it is not
loopback, e.g. when ray was imported earlier in the process without the switch.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import ipaddress
import os
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from sequence_salience.errors import SalienceError
from sequence_salience.evaluate.engine import EvalConfig, Row, RowEvaluation, evaluate_row
from sequence_salience.model import DEFAULT_MODEL

Task = tuple[Hashable, Row]
Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How a worker loads its model (sequence_salience.load_model's arguments)."""

    model: str = DEFAULT_MODEL
    device: str = "cpu"
    dtype: str = "float32"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The result of one task: `evaluation` when it worked, else `error` (one line).

    seconds: the worker's time on the row (last attempt); attempts: 1 + retries after worker
    deaths; worker: "pid@host" of the process that ran it.
    """

    key: Hashable
    evaluation: RowEvaluation | None
    error: str | None
    seconds: float
    attempts: int = 1
    worker: str = ""


class RowWorker:
    """Holds one loaded model and evaluates rows with it (a Ray actor class too)."""

    def __init__(self, spec: ModelSpec, config: EvalConfig, lm=None):
        from sequence_salience.model import load_model  # pylint: disable=import-outside-toplevel

        self.spec, self.config = spec, config
        self.lm = lm if lm is not None else load_model(spec.model, device=spec.device, dtype=spec.dtype,
                                                       log=lambda _msg: None)
        self.name = f"{os.getpid()}@{os.uname().nodename}"

    def ready(self) -> str:
        return self.name

    def run(self, key: Hashable, row: Row) -> Outcome:
        start = time.perf_counter()
        try:
            evaluation = evaluate_row(self.lm, row, self.config)
        except SalienceError as e:
            return Outcome(key, None, str(e), time.perf_counter() - start, worker=self.name)
        except Exception as e:  # pylint: disable=broad-except  # e.g. out of memory: one row fails, not the run
            return Outcome(key, None, f"{type(e).__name__}: {_first_line(e)}", time.perf_counter() - start,
                           worker=self.name)
        return Outcome(key, evaluation, None, time.perf_counter() - start, worker=self.name)


def run_serial(tasks: Iterable[Task], worker: RowWorker) -> Iterator[Outcome]:
    """Evaluates the tasks in order on one worker."""
    for key, row in tasks:
        yield worker.run(key, row)


# The Ray versions --ray supports (the same range as pyproject's [ray] extra; checked: 2.60.0 by
# tests/integration/test_evaluate_ray.py, 2.9.3's loopback-only start by hand). Outside it, connect
# refuses with the fix: a Ray 3 may start its servers otherwise.
SUPPORTED_RAY = ">=2.9,<3"
# Ray's single-node switch (ray._private.ray_constants.ENABLE_RAY_CLUSTER, read when ray is first
# imported): "0" makes the node's address 127.0.0.1, so every server Ray starts binds to loopback.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def ray_available() -> bool:
    """Whether Ray is installed (without importing it: connect sets LOOPBACK_ENV first)."""
    return "ray" in sys.modules or importlib.util.find_spec("ray") is not None


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and the IPv4-mapped ::ffff:127.x.y.z; "localhost"."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def check_ray_version(version: str) -> None:
    """SalienceError unless `version` is in SUPPORTED_RAY."""
    from packaging.specifiers import SpecifierSet  # pylint: disable=import-outside-toplevel
    from packaging.version import InvalidVersion, Version  # pylint: disable=import-outside-toplevel

    try:
        ok = Version(version) in SpecifierSet(SUPPORTED_RAY)
    except InvalidVersion:
        ok = False
    if not ok:
        raise SalienceError(f"Ray {version} is installed; --ray was checked with Ray {SUPPORTED_RAY}. "
                            f"Fix: pip install 'ray{SUPPORTED_RAY}' (or 'sequence-salience[ray]').")


def _import_ray():
    try:
        import ray  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise SalienceError("Ray is not installed. Fix: pip install 'sequence-salience[ray]' "
                            "(or pip install ray), or run without --ray.") from None
    check_ray_version(ray.__version__)
    return ray


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def connect(address: str | None, num_cpus: int | None, log: Log = print) -> bool:
    """ray.init: a local instance on loopback when address is None (num_cpus CPUs), else join the
    cluster at `address` ("auto": the one started on this machine by `ray start`). Returns whether
    this call started Ray (so the caller shuts it down); an instance already initialized in this
    process is used as it is.

    For a local instance, LOOPBACK_ENV is set in os.environ before ray is imported and this package's
    root put first on its PYTHONPATH before ray.init (both stay set: the processes Ray starts later
    inherit them), and Ray's node address is checked to be loopback before ray.init. A process that imported ray without it gets a SalienceError naming the fix; a
    process that imported it with it cannot join a remote cluster (its driver would be 127.0.0.1).
    """
    if address is None and "ray" not in sys.modules:
        os.environ.update(LOOPBACK_ENV)
    ray = _import_ray()
    if ray.is_initialized():
        return False
    if address is None:
        node_ip = ray.util.get_node_ip_address()
        if not is_loopback(node_ip):
            raise SalienceError(
                f"a local Ray instance would listen on {node_ip} (every interface), not loopback: ray was imported "
                f"in this process before {' '.join(f'{k}={v}' for k, v in LOOPBACK_ENV.items())} was set. Fix: set "
                "that variable before importing ray (or in the environment), or start a cluster yourself "
                "(`ray start --head`, see the README) and pass its address.")
    # Workers import this package the way the driver does (a source checkout on PYTHONPATH too).
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    path = os.pathsep.join(dict.fromkeys(p for p in (_package_root(), *inherited) if p))
    if address is None:
        # A local instance's raylet and workers inherit this process's environment (as LOOPBACK_ENV): with
        # PYTHONPATH set here the actors take the Python workers the raylet starts beforehand (one per CPU). A
        # runtime_env would leave those idle and start each actor a process of its own through Ray's runtime-env
        # set-up (docs/benchmarks.md, "Session 41 (h3)").
        os.environ["PYTHONPATH"] = path
        log(f"Starting a local Ray instance ({num_cpus} CPUs, Ray {ray.__version__}, listening on {node_ip} only) ...")
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        log(f"Connecting to the Ray cluster at {address} ...")
        try:
            ray.init(address=address, runtime_env={"env_vars": {"PYTHONPATH": path}}, log_to_driver=False)
        except ConnectionError as e:
            raise SalienceError(f"cannot reach the Ray cluster at {address!r} ({e}). Fix: start it with "
                                "`ray start --head` (see the README), or drop the address for a local instance.") from None
    return True


def default_workers(gpus_per_worker: float, cpus_per_worker: float) -> int:
    """As many workers as the cluster's GPUs (or CPUs, without GPUs) allow; at least 1."""
    ray = _import_ray()
    res = ray.cluster_resources()
    if gpus_per_worker > 0:
        n = int(res.get("GPU", 0) // gpus_per_worker)
        if n < 1:
            raise SalienceError(f"--gpus-per-worker {gpus_per_worker}: the cluster has {res.get('GPU', 0)} GPU(s). "
                                "Fix: add GPU nodes, lower --gpus-per-worker, or use 0 (CPU workers).")
        return n
    return max(1, int(res.get("CPU", 1) // cpus_per_worker))


def _wait_ready(ray, actors: list, spec: ModelSpec, log: Log, start: float, entered: float) -> None:
    """Waits until every actor has loaded its model (they load in parallel) and logs how long that took;
    SalienceError naming the model when one could not start."""
    names = []
    for actor in actors:
        try:
            names.append(ray.get(actor.ready.remote()))
        except ray.exceptions.RayActorError as e:
            raise SalienceError(f"a Ray worker could not start or load --model {spec.model!r}: "
                                f"{_first_line(e)}") from None
    log(f"{len(actors)} Ray worker(s) ready after {time.perf_counter() - start:.1f} s "
        f"({time.perf_counter() - entered:.1f} s since the start, Ray included): {', '.join(names)}")


def _hand_out(ray, actors: list, tasks: list[Task], new_actor: Callable[[], Any], max_attempts: int,
              log: Log) -> Iterator[Outcome]:
    """Hands the rows to idle actors as they free up and yields each Outcome as it finishes. A row whose
    actor died is retried on a fresh actor (`new_actor()`, added to `actors`) up to max_attempts times."""
    queue = collections.deque((key, row, 1) for key, row in tasks)
    idle = list(actors)
    pending: dict[Any, tuple[Any, Hashable, Row, int]] = {}
    while queue or pending:
        while queue and idle:
            actor = idle.pop()
            key, row, attempt = queue.popleft()
            pending[actor.run.remote(key, row)] = (actor, key, row, attempt)
        ready, _ = ray.wait(list(pending), num_returns=1)
        ref = ready[0]
        actor, key, row, attempt = pending.pop(ref)
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            actors.remove(actor)
            log(f"worker died on row {key} (attempt {attempt}): {_first_line(e)}")
            if attempt < max_attempts:
                queue.appendleft((key, row, attempt + 1))
            else:
                yield Outcome(key, None, f"its worker died {attempt} times ({_first_line(e)}); "
                                         "Fix: check the worker's memory and logs", 0.0, attempt)
            if queue or pending:  # a fresh actor takes the dead one's place; calls wait for its model
                replacement = new_actor()
                actors.append(replacement)
                idle.append(replacement)
            continue
        idle.append(actor)
        yield dataclasses.replace(outcome, attempts=attempt)


def run_ray(
    tasks: Iterable[Task],
    spec: ModelSpec,
    config: EvalConfig,
    *,
    address: str | None = None,
    num_workers: int | None = None,
    gpus_per_worker: float = 0.0,
    cpus_per_worker: float = 1.0,
    max_attempts: int = 3,
    worker_cls: type = RowWorker,
    worker_args: tuple = (),
    log: Log = print,
) -> Iterator[Outcome]:
    """Evaluates the tasks on Ray actors; yields an Outcome per task in the order they finish.

    Args:
      address: None (a local instance on loopback, num_workers * cpus_per_worker CPUs), "auto"
        or "HOST:PORT" of a running cluster.
      num_workers: actors (default: what the cluster's GPUs, or CPUs, allow).
      gpus_per_worker: GPUs per actor (0: CPU workers; with > 0 a "cpu" spec device becomes "cuda").
      max_attempts: tries per row when its worker dies (a failed row is never retried).
      worker_cls, worker_args: the actor class (default RowWorker(spec, config, *worker_args)).
    """
    tasks = list(tasks)
    if not tasks:
        return
    if gpus_per_worker > 0 and spec.device == "cpu":
        spec = dataclasses.replace(spec, device="cuda")
    local_cpus = None
    if address is None:
        local_cpus = int(max(1, (num_workers or os.cpu_count() or 1) * cpus_per_worker))
    entered = time.perf_counter()
    started = connect(address, local_cpus, log)  # imports ray (after LOOPBACK_ENV, for a local instance)
    ray = _import_ray()
    actors: list[Any] = []
    try:
        n = num_workers or default_workers(gpus_per_worker, cpus_per_worker)
        n = max(1, min(n, len(tasks)))
        remote_cls = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0)(worker_cls)

        start = time.perf_counter()
        actors.extend(remote_cls.remote(spec, config, *worker_args) for _ in range(n))
        _wait_ready(ray, actors, spec, log, start, entered)
        yield from _hand_out(ray, actors, tasks, lambda: remote_cls.remote(spec, config, *worker_args), max_attempts,
                             log)
    finally:
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:  # pylint: disable=broad-except  # already dead
                pass
        if started:
            ray.shutdown()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
