"""Options and fixtures shared by every test tier: --soak-seconds, `stub_client_root`, `default_lm` (the default model,
loaded once per session), and `lit_server`, the one real server of the session."""

import os
from collections.abc import Iterator

import pytest

from tests.server_process import ServerProcess

# The in-suite soak is the smoke of the long one (issue 43's 10 minutes, on demand): the warm-up runs every kind of
# request and job once, then all clients at once for this long, with the same checks. 45 s until session 38; 20 s
# cost 15 s less CPU (62.0 -> 47.4 s at load 9-18; each hostile kind still sent 185-567 times in the load) and ended
# its load 48 s sooner (docs/benchmarks.md, "Session 38 (h5)").
DEFAULT_SOAK_SECONDS = 20.0

# Under pytest-xdist (`make test`: -n 3), the workers share the cores: torch gets cores / workers intra-op
# threads (at least 1) in each worker and the servers it starts (set before any test file imports torch; a value the
# caller set is kept). Two torch threads per worker on 2 cores mostly wait for each other (docs/benchmarks.md,
# "evaluate --ray": one thread per process ran about 4x faster under load).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))


# The order `make test` hands whole files to its workers (--dist loadfile --no-loadscope-reorder keeps collection
# order): the tiers with the longest single files first, so that no long file is handed out last and runs alone
# while the other workers sit idle. The notebooks (one file, three notebooks: ~100-150 s under -n 3) and the soak
# (one test, ~85 s) were collected after tests/integration; the notebooks were the last file running for the
# final ~30 s of a fresh-clone run, one worker busy, the CPU half idle (docs/benchmarks.md, session 25).
_TIER_ORDER = ("e2e", "notebooks", "soak", "integration", "unit")


# The session server's --job_heartbeat_s: a background job nobody polled for this long stops. The salience page
# polls every 0.7 s (its POLL_MS, frontend/src/salience/), the tests' own pollers every 0.05-0.5 s, and a poll
# does not wait for the model (it is not counted against --max_pending_requests), so 10 s is more than ten missed
# polls. The default 30 s let the jobs of a closed page run 30 s more: a fresh-clone run's three session servers
# logged 8 such jobs ("nobody polled it for 30 s"), each after the test that started it had ended
# (docs/benchmarks.md, session 29). A closing page now stops its jobs itself (pagehide -> `detail="page_closed"`,
# frontend/src/salience/page_exit.ts); the heartbeat stops those of a page that dies without one, and the tests'
# own pollers'. tests/integration/test_disconnect.py tests the heartbeat itself.
SESSION_JOB_HEARTBEAT_S = 10


def _tier(item: pytest.Item) -> int:
    parts = item.path.relative_to(item.config.rootpath).parts
    tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return _TIER_ORDER.index(tier) if tier in _TIER_ORDER else len(_TIER_ORDER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers in _TIER_ORDER; within a tier the collection order (a stable sort)."""
    items.sort(key=_tier)


def pytest_addoption(parser):
    parser.addoption(
        "--soak-seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", DEFAULT_SOAK_SECONDS)),
        help=f"How long tests/soak runs its client threads (default {DEFAULT_SOAK_SECONDS:g} s,"
             " or $SOAK_SECONDS); e.g. --soak-seconds 600 for a long soak.")


@pytest.fixture(scope="module")
def stub_client_root(tmp_path_factory) -> str:
    """A client root built around a stub bundle, one per test module: the server-side tests (integration, and unit
    tests of the LIT app on a tiny model) run whether or not the frontend is built."""
    from lit_app.serving import client_build  # pylint: disable=import-outside-toplevel  (tiers that need no LIT)

    bundle = tmp_path_factory.mktemp("dist") / client_build.BUNDLE_NAME
    bundle.write_text("// stub bundle for tests\n", encoding="utf-8")
    return client_build.build_client_root(str(tmp_path_factory.mktemp("client_root")), bundle_path=str(bundle))


@pytest.fixture(scope="session")
def default_lm():
    """The embedded SmolLM2-135M-Instruct (`ss.load_model("default")`: the first load converts the GGUF, ~25 s; later
    a few seconds from the cache), loaded once per session (per xdist worker) for every tier's in-process references
    (the integration tests, the soak's). Shared: do not mutate it."""
    import sequence_salience as ss  # pylint: disable=import-outside-toplevel  (tiers that need no model)

    return ss.load_model("default")


@pytest.fixture(scope="session")
def lit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`python -m lit_app.server --host 127.0.0.1` on the default model with the repository's client root (as
    `make serve` serves it), started once per session (a start imports torch and LIT and loads the model) and
    stopped at its end.

    One start-up flag differs from `make serve`: `--job_heartbeat_s` (SESSION_JOB_HEARTBEAT_S). A browser test's
    page selects a datapoint, which starts its background matrix job; when the test ends the page closes and stops
    it (`detail="page_closed"`); a job whose page or poller went without that ran on, nobody polling it, for the
    default 30 s, taking the model and a core from the worker's next tests.

    For the tests that only send requests to a real server (the browser tests, and HTTP tests that need a
    real socket); each reads or cancels only its own requests. A test that needs a start-up flag, sends the
    process a signal or watches it exit starts its own `ServerProcess` and says why.
    """
    with ServerProcess(["--host", "127.0.0.1", "--job_heartbeat_s", str(SESSION_JOB_HEARTBEAT_S)],
                       tmp_path_factory.mktemp("server"), own_client_root=False) as proc:
        assert proc.token and proc.url == f"http://127.0.0.1:{proc.port}/?token={proc.token}", proc.url
        yield proc


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "soak: a real server under concurrent valid and malformed requests (--soak-seconds)")
