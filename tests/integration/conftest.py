"""Shared fixtures for integration tests: a client root and the in-process LIT app on the session's default model
(`default_lm`, tests/conftest.py): `make_shared`, `lit`."""

import time

import pytest

from lit_app.serving import model_group
from lit_app.data import datasets
from lit_app import server
from lit_app.model import shared_model

MODEL = "smollm2"


@pytest.fixture(scope="module")
def make_shared(default_lm):
    """`make_shared(**kw)`: a `shared_model.SharedLM(default_lm, **kw)` for this test module. At the module's
    end every background job it started (the first highlight starts one) is cancelled and waited for: none
    may still run torch when the interpreter exits."""
    made: list[shared_model.SharedLM] = []

    def make(**kw) -> shared_model.SharedLM:
        made.append(shared_model.SharedLM(default_lm, **kw))
        return made[-1]

    yield make
    for shared in made:
        shared.jobs.cancel_all()
    deadline = time.monotonic() + 600  # a failure bound, not a timing assertion
    while not all(shared.jobs.idle() for shared in made):
        assert time.monotonic() < deadline, "the background jobs never stopped"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def lit(shared, stub_client_root):
    """The server's LIT app in-process (model group `MODEL`, the shipped datasets, this module's stub client
    root) on the module's `shared` fixture (a module that asks for `lit` defines `shared`, e.g. with
    `make_shared`)."""
    return server.build_app(model_group.lit_models(shared, MODEL), datasets.get_datasets(), stub_client_root)


def pytest_collection_modifyitems(items):
    """Everything under tests/integration is marked `integration`."""
    for item in items:
        if "/tests/integration/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
