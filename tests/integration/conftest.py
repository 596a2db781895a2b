"""Shared fixtures for integration tests: the embedded default model (loaded once per session) and a client root."""

import pytest

import sequence_salience as ss
from lit_app import client_build


@pytest.fixture(scope="session")
def default_lm() -> ss.LanguageModel:
    """The embedded SmolLM2-135M-Instruct (first load converts the GGUF, ~25 s; later <1 s from the cache).

    Shared by every integration test: do not mutate it.
    """
    return ss.load_model("default")


@pytest.fixture(scope="module")
def stub_client_root(tmp_path_factory) -> str:
    """A client root built around a stub bundle, one per test module: the server-side tests run whether
    or not the frontend is built."""
    bundle = tmp_path_factory.mktemp("dist") / client_build.BUNDLE_NAME
    bundle.write_text("// stub bundle for tests\n", encoding="utf-8")
    return client_build.build_client_root(str(tmp_path_factory.mktemp("client_root")), bundle_path=str(bundle))


def pytest_collection_modifyitems(items):
    """Everything under tests/integration is marked `integration`."""
    for item in items:
        if "/tests/integration/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
