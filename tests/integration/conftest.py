"""Shared fixtures for integration tests: the embedded default model, loaded once per session."""

import pytest

import sequence_salience as ss


@pytest.fixture(scope="session")
def default_lm() -> ss.LanguageModel:
    """The embedded SmolLM2-135M-Instruct (first load converts the GGUF, ~25 s; later <1 s from the cache).

    Shared by every integration test: do not mutate it.
    """
    return ss.load_model("default")


def pytest_collection_modifyitems(items):
    """Everything under tests/integration is marked `integration`."""
    for item in items:
        if "/tests/integration/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
