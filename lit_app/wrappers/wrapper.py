"""The base of every LIT model wrapper over the shared model (`Wrapper`).

A wrapper answers one input at a time (`_predict_one`), over one `SharedLM`; every
error it raises reaches LIT as a one-line `RequestError` (lit_app/errors.py). The
capabilities subclass it: lit_app/wrappers/generation.py, salience.py, tokenizer.py, inside.py,
explain.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Callable, ClassVar

from lit_nlp.api import model as lit_model
from lit_nlp.api import types as lit_types

import sequence_salience as ss
from lit_app.schema import fields
from lit_app.errors import Cancelled, RequestError, one_line, prompt_start
from lit_app.schema.inputs import JsonDict
from lit_app.model.shared_model import SharedLM

logger = logging.getLogger(__name__)


def needs_model(model: Any) -> bool:
    """Whether a LIT model (ours, or LIT's wrapper around one) may wait for the loaded model; True for
    any model that does not say otherwise."""
    return bool(getattr(getattr(model, "wrapped", model), "needs_model", True))


class Wrapper(lit_model.Model):
    """Common plumbing: one example at a time, errors turned into RequestError."""

    # LIT's per-id prediction cache is bypassed for these (lit_app/server.py):
    # they cache by content themselves.
    caches_itself = True
    # False for a wrapper that never waits for the model (the tokenizer): the middleware does not count
    # its requests against --max_pending_requests, so it answers while the model queue is full.
    needs_model = True
    # The LIT specs of the subclass (input_spec / output_spec return copies).
    INPUT_SPEC: ClassVar[lit_types.Spec]
    OUTPUT_SPEC: ClassVar[lit_types.Spec]

    def __init__(self, shared: SharedLM):
        self._shared = shared

    @classmethod
    def from_loaded(cls, existing: "Wrapper") -> "Wrapper":
        """Another wrapper over the same loaded model."""
        return cls(existing._shared)

    @classmethod
    def init_spec(cls) -> lit_types.Spec | None:
        return None  # not loadable from the UI; the server loads the model

    def input_spec(self) -> lit_types.Spec:
        return dict(self.INPUT_SPEC)

    def output_spec(self) -> lit_types.Spec:
        return dict(self.OUTPUT_SPEC)

    @property
    def shared(self) -> SharedLM:
        return self._shared

    def description(self) -> str:
        return f"{type(self).__name__} over {self._shared.name}"

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        raise NotImplementedError

    def predict(self, inputs: Iterable[JsonDict], **unused_kw) -> list[JsonDict]:
        outputs = []
        for ex in inputs:
            if not isinstance(ex, Mapping):  # LIT passes dataset rows as read-only mappingproxy
                raise RequestError(f"Each input must be a JSON object, got {type(ex).__name__}.")
            outputs.append(_guarded(type(self).__name__, self._predict_one, ex))
        return outputs


# The Retry-After of a pattern not tried while other matches run out their limit (aggregate.match_spans).
PATTERN_RETRY_AFTER_S = 1


def refused(message: str, error: Exception) -> RequestError:
    """A refused request's error: 503 with Retry-After where the server was busy, not the input wrong (a user pattern
    not tried while other matches run out their limit: `ss.PatternBusy`; its message says to send it again, and the
    page's request guard does), else 400."""
    if isinstance(error, ss.PatternBusy):
        return RequestError(message, status=503, retry_after_s=PATTERN_RETRY_AFTER_S)
    return RequestError(message)


def _guarded(who: str, fn: Callable[[JsonDict], JsonDict], ex: JsonDict) -> JsonDict:
    def name() -> str:  # each line names its request by the start of its prompt (which of several it is)
        return prompt_start(ex.get(fields.PROMPT))

    try:
        return fn(ex)
    except Cancelled as e:  # no mistake and no fault: one INFO line (lit_app/model/cancel.py)
        logger.info("%s: %s (prompt %s)", who, e, name())
        raise
    except RequestError as e:
        logger.warning("%s: rejected request: %s (prompt %s)", who, e, name())
        raise
    except (ss.SalienceError, ValueError, TypeError, KeyError) as e:
        message = one_line(str(e) if not isinstance(e, KeyError) else f"missing key {e}", limit=None)
        logger.warning("%s: rejected request: %s (prompt %s)", who, message, name())
        raise refused(message, e) from e
    except Exception as e:  # pylint: disable=broad-except
        logger.exception("%s: internal error (prompt %s)", who, name())
        raise RequestError(
            one_line(f"Internal error ({type(e).__name__}: {e}); the server log has the traceback.", limit=None)
        ) from e

