"""The LIT salience wrapper over a seeded tiny Llama, as the unit tests of the LIT wrappers share it."""

from __future__ import annotations

from collections.abc import Iterator

import sequence_salience as ss
from lit_app.serving import model_group
from lit_app.model import shared_model
from tests.unit.tiny_models import tiny_llama, wrap


def tiny_salience_lit() -> Iterator[tuple[ss.LanguageModel, shared_model.SharedLM, object]]:
    """Yields (the tiny Llama, its SharedLM (4 new tokens, no disk cache), its "_tiny_salience" LIT wrapper),
    then cancels every job the SharedLM started. A test module makes it its fixture:
    `tiny = pytest.fixture(scope="module")(tiny_salience_lit)`."""
    lm = wrap(tiny_llama(seed=0), "llama")
    shared = shared_model.SharedLM(lm, max_new_tokens=4, disk_cache=False)
    yield lm, shared, model_group.lit_models(shared, "tiny")["_tiny_salience"]
    shared.jobs.cancel_all()
