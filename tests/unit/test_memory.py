"""lit_app/memory.py: freed model-pass memory goes back to the OS when the model is let go, at a bounded rate."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from lit_app import memory
from lit_app.model.scheduler import ModelScheduler
from tests.server_process import REPO
from tests.unit.waiting import wait_until

GLIBC = platform.libc_ver()[0] == "glibc"


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_trimmer_trims_at_most_once_per_interval_and_then_once_more_at_its_end():
    calls = []
    clock = FakeClock()
    trimmer = memory.Trimmer(min_interval_s=0.3, delay_s=0, trim=lambda: calls.append(clock.now) or True, clock=clock)
    try:
        trimmer()
        wait_until(lambda: len(calls) == 1, "the first trim (at once, on a timer thread)")
        clock.now += 0.1
        trimmer()  # inside the interval: one trim scheduled for its end (0.2 s from now) ...
        trimmer()  # ... and not a second one
        assert len(calls) == 1
        clock.now += 0.5
        wait_until(lambda: trimmer.trims == 2, "the trim at the end of the interval")
        assert calls == [100.0, 100.6]
    finally:
        trimmer.cancel()


def test_a_failing_trim_never_fails_the_caller():
    tried = []

    def boom() -> bool:
        tried.append(1)
        raise OSError("no")

    trimmer = memory.Trimmer(min_interval_s=0, delay_s=0, trim=boom)
    trimmer()
    wait_until(lambda: tried, "the trim attempt")
    assert trimmer.trims == 0


def test_the_scheduler_calls_on_free_once_the_re_entrant_model_is_let_go():
    freed = []
    lock = ModelScheduler()
    lock.on_free = lambda: freed.append(lock.locked())
    with lock:
        with lock.background():  # re-entrant: not let go yet
            pass
        assert freed == []
    assert freed == [False]  # after the outermost release, with the model already free

    # yield_to_waiting lets a waiting request go first: the model is let go (and taken back) once.
    got = threading.Event()
    with lock.background():
        t = threading.Thread(target=lambda: (lock.acquire(), got.set(), lock.release()))
        t.start()
        wait_until(lambda: lock.waiting() == 1, "the second acquirer to queue")
        assert lock.yield_to_waiting() and got.is_set()
    t.join(5)
    assert len(freed) == 4  # ours at the yield, the waiter's, ours at the end


def test_shared_model_gives_memory_back_when_its_model_is_let_go():
    from lit_app.model.shared_model import SharedLM
    from tests.unit.tiny_models import MODEL_BUILDERS, wrap

    shared = SharedLM(wrap(MODEL_BUILDERS["llama"](seed=0), "llama"), max_new_tokens=2, disk_cache=False)
    before = memory.trim_count()
    shared.generate(shared.format_prompt({"prompt": "hi", "chat": False}))
    wait_until(lambda: memory.trim_count() > before, "a trim after the generation")


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; other C libraries are left alone")
def test_malloc_trim_returns_freed_heap_memory_that_glibc_kept():
    """200 MB in 64 KiB blocks (below glibc's mmap threshold: from the arenas), all freed but the last
    (it pins the top of the heap, so glibc's automatic trim gives nothing back): RSS stays high until
    malloc_trim, which returns the freed pages."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    block, count = 64 * 1024, 3200
    start = _rss_mb()
    blocks = []
    for _ in range(count):
        p = libc.malloc(block)
        ctypes.memset(p, 1, block)  # touch every page
        blocks.append(p)
    grown = _rss_mb()
    assert grown - start > 150
    for p in blocks[:-1]:
        libc.free(p)
    kept = _rss_mb()
    assert kept - start > 150, "glibc gave the memory back without a trim; nothing to test here"
    assert memory.malloc_trim() is True
    trimmed = _rss_mb()
    libc.free(blocks[-1])
    print(f"RSS: start {start:.0f} MB, 200 MB allocated {grown:.0f}, freed {kept:.0f}, trimmed {trimmed:.0f}")
    assert kept - trimmed > 150


def test_a_compute_request_that_ends_schedules_a_trim():
    """What a request frees after the model is let go (its graph, its answer) is given back too."""
    from werkzeug.test import Client

    from lit_app.edge import security, security_config

    def lit(environ, start_response):  # a stand-in for LIT's app: any answer
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b"[]"]

    client = Client(security.SecureApp(lit, security_config.SecurityConfig(port=5432)), use_cookies=False)
    before = memory.trim_count()
    r = client.post("/get_preds?model=m", data='{"inputs": [{"id": "a", "data": {"prompt": "hi"}}]}',
                    headers={"Host": "127.0.0.1:5432", "Content-Type": "application/json"})
    assert r.status_code == 200
    wait_until(lambda: memory.trim_count() > before, "a trim after the request")


def test_release_memory_collects_cycles_holding_tensors_once_startup_objects_are_frozen():
    """A reference cycle (a cancelled computation's exception and frames) keeps its tensors until a full
    collection; after `freeze_startup_objects` the trimmer runs one, cheaply, before malloc_trim."""
    import gc
    import weakref

    import torch

    class Holder:
        pass

    def cycle() -> weakref.ref:
        a, b = Holder(), Holder()
        a.other, b.other = b, a
        a.tensor = torch.zeros(1000)
        return weakref.ref(a.tensor)

    gc.disable()  # only an explicit collection may free the cycles
    try:
        unfrozen = cycle()
        memory.release_memory()
        assert unfrozen() is not None  # not frozen: no full collection (it would hold the GIL ~1 s)
        memory.freeze_startup_objects()  # its own collection frees the first cycle
        assert unfrozen() is None
        alive = cycle()
        assert alive() is not None  # a cycle: reference counting alone never frees it
        memory.release_memory()
        assert alive() is None
    finally:
        memory.unfreeze()
        gc.enable()


# Four threads each run a few matrix products (MKL's sgemm) and stay alive; printed: malloc's memory in use
# (mallinfo2) they added, per thread. argv[1] "lit_app": `import lit_app` before torch, as the server does.
_MKL_THREADS_SCRIPT = """
    import ctypes, sys, threading
    if sys.argv[1] == "lit_app":
        import lit_app  # noqa: F401
    import torch

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def in_use():
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd

    torch.set_num_threads(1)
    a, b = torch.randn(64, 576), torch.randn(576, 4096)
    (a @ b).sum()
    go = threading.Event()

    def run(done):
        for _ in range(3):
            (a @ b).sum()
        done.set()
        go.wait()

    before, threads = in_use(), []
    for _ in range(4):
        done = threading.Event()
        threads.append(threading.Thread(target=run, args=(done,)))
        threads[-1].start()
        done.wait()
    print((in_use() - before) / 4 / 2**20)
    go.set()
    for t in threads:
        t.join()
"""


def _mb_kept_per_thread(first: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != memory.MKL_POOLS_ENV}  # this process may have set it
    # An OpenMP team, as a server started by hand has: tests/conftest.py sets OMP_NUM_THREADS=1 for `make test`'s
    # workers, and with one OpenMP thread MKL keeps no per-thread pool, so the control read 0.04 MB there.
    env["OMP_NUM_THREADS"] = "2"
    return _printed_by_a_fresh_interpreter(_MKL_THREADS_SCRIPT, first, env)


def _printed_by_a_fresh_interpreter(script: str, arg: str, env: dict[str, str]) -> float:
    """The number a fresh interpreter running `script` with argv[1] = `arg` printed last."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), arg], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(not (GLIBC and torch.backends.mkl.is_available()), reason="MKL's pools, seen with glibc's mallinfo2")
def test_threads_that_ran_matrix_products_keep_no_mkl_buffers_once_lit_app_is_imported_before_torch():
    """MKL kept ~18 MB per thread of this product's work buffers until the thread ended (the control: torch alone);
    the server's many long-lived threads each kept their pool (docs/benchmarks.md, "Session 37 (h1)")."""
    assert _mb_kept_per_thread("torch") > 5  # the pools exist in this build: what the assertion below would see
    assert _mb_kept_per_thread("lit_app") < 1


def test_mkl_pools_are_turned_off_only_before_torch_is_imported(monkeypatch):
    monkeypatch.delenv(memory.MKL_POOLS_ENV, raising=False)
    assert "torch" in sys.modules and not memory.no_mkl_buffer_pools()  # too late: MKL read it when torch loaded
    assert memory.MKL_POOLS_ENV not in os.environ
    monkeypatch.delitem(sys.modules, "torch")
    assert memory.no_mkl_buffer_pools() and os.environ[memory.MKL_POOLS_ENV] == "1"
    monkeypatch.setenv(memory.MKL_POOLS_ENV, "0")  # the user's own setting wins
    assert not memory.no_mkl_buffer_pools() and os.environ[memory.MKL_POOLS_ENV] == "0"


# A thread (its own arena, as the server's request and worker threads have) frees a 24 MB block (mmapped: glibc then
# raises its thresholds, as the model's load does), then 10 blocks of 2 MB, all freed; printed: MB still resident
# after malloc_trim. argv[1] "lit_app": `import lit_app` first, as the server does.
_THRESHOLDS_SCRIPT = """
    import ctypes, re, sys, threading
    if sys.argv[1] == "lit_app":
        import lit_app  # noqa: F401
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-8, 2)  # the server's arenas (memory.cap_malloc_arenas)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def rss():
        with open("/proc/self/status", encoding="ascii") as f:
            return int(re.search(r"VmRSS:\\s+(\\d+) kB", f.read()).group(1)) / 1024

    def touched(size):
        p = libc.malloc(size)
        ctypes.memset(p, 1, size)
        return p

    def run():
        libc.free(touched(24 << 20))
        for p in [touched(2 << 20) for _ in range(10)]:
            libc.free(p)

    before = rss()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    libc.malloc_trim(0)
    print(rss() - before)
"""


def _mb_kept_by_a_thread_arena(first: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    return _printed_by_a_fresh_interpreter(_THRESHOLDS_SCRIPT, first, env)


@pytest.mark.skipif(not GLIBC, reason="glibc's thresholds; other C libraries are left alone")
def test_a_thread_arena_gives_freed_blocks_back_once_lit_app_fixed_the_malloc_thresholds():
    """glibc's raised trim threshold (twice the 24 MB block) kept the thread arena's 20 MB free top resident, and
    malloc_trim trims the main arena's top only (the control); with the thresholds fixed it is given back."""
    assert _mb_kept_by_a_thread_arena("plain") > 15
    assert _mb_kept_by_a_thread_arena("lit_app") < 3


def test_the_user_s_own_malloc_thresholds_win(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert not memory.fixed_malloc_thresholds()
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert not memory.fixed_malloc_thresholds()
    monkeypatch.delenv("GLIBC_TUNABLES")
    assert memory.fixed_malloc_thresholds() is GLIBC  # the defaults again (`import lit_app` set them)
