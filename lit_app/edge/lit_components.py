"""LIT's own interpreters, generators and datapoint files: the client mistakes they fail on, as 4xx.

LIT 1.3.1 runs its interpreters (Tabular SHAP, Salience Clustering, PDP, TCAV, ...) and generators
(Hotflip, Ablation Flip, ...) with the request's `config` as sent; most of them do not apply to a
language model's prompt and response, and a missing or wrong config fails deep inside them
("list index out of range", "config must be provided", "Please provide the prediction key"). LIT
answered each with 500 and a traceback. `SequenceSalienceApp` (lit_app/server.py) runs them through
`component_call`, and /save_datapoints and /load_datapoints through `file_call`:

* `component_call`: an exception raised inside LIT's component code (no frame of this package or of
  the core library between the call and the raise: a fault of our models stays a 500) becomes a
  `RequestError` (400) naming the component, the `config` field and where its config spec is listed.
* `file_call`: an OSError of LIT's datapoint files (a missing `.lit.jsonl`, a missing folder, a name
  too long for the file system) or a file it cannot parse becomes a 400 naming `?path=`.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sequence_salience
from lit_app.errors import RequestError, one_line

T = TypeVar("T")

# Our code: a frame here between the call and the raise means the fault is ours, not the config's.
_OWN_ROOTS = (str(Path(__file__).resolve().parents[1]), str(Path(sequence_salience.__file__).resolve().parent))
_SHOWN_CHARS = 60
# What LIT's components raise for a config or an input they cannot use.
_COMPONENT_ERRORS = (ValueError, TypeError, LookupError, AttributeError, AssertionError, NotImplementedError,
                     ZeroDivisionError)


def _raised_in_lit(error: BaseException) -> bool:
    """True when, after the callers' own frames (this module, the app's override), no frame lies in this package
    or the core library: LIT's code raised it without calling ours (a model's fault stays a 500)."""
    own = [str(Path(f.filename).resolve()).startswith(_OWN_ROOTS) for f in traceback.extract_tb(error.__traceback__)]
    first_lit = own.index(False) if False in own else len(own)
    return first_lit < len(own) and not any(own[first_lit:])


def component_call(kind: str, name: str | None, model: str | None, config: Any, call: Callable[[], T]) -> T:
    """`call()` (LIT's /get_interpretations or /get_generated); RequestError(400) for a failure inside LIT's
    `kind` ("interpreter" or "generator") `name`, naming it, the model and the `config` field.

    Raises:
      RequestError: `config` is neither absent nor an object, or the component failed inside LIT's code.
    """
    if config is not None and not isinstance(config, dict):
        raise RequestError(f'"config" of {kind} {name!r} must be an object, got {type(config).__name__}. Fix: send'
                           f' {{"config": {{...}}}} with the keys /get_info lists under {kind}s[{name!r}].configSpec.')
    try:
        return call()
    except RequestError:
        raise
    except _COMPONENT_ERRORS as e:
        if not _raised_in_lit(e):
            raise
        shown = "none" if config is None else one_line(json.dumps(config, default=str), _SHOWN_CHARS)
        reason = one_line(f"{type(e).__name__}: {e}", 160)
        raise RequestError(f'LIT\'s {kind} {name!r} cannot run on model {model!r} with "config" {shown} ({reason}).'
                           f" Fix: send the \"config\" /get_info lists under {kind}s[{name!r}].configSpec, or use"
                           f" another {kind} that applies to this model's prompts (most of LIT's own are for"
                           " classifiers and tabular data).") from None


def file_call(route: str, path: str | None, call: Callable[[], T]) -> T:
    """`call()` (LIT's /save_datapoints or /load_datapoints of `path`); RequestError(400) naming ?path= when
    the file cannot be written or read (OSError) or parsed (ValueError: not JSON, not UTF-8)."""
    try:
        return call()
    except RequestError:
        raise
    except (OSError, ValueError) as e:
        # The end of a long path is the part the client wrote (the server's data folder before it is not shown
        # to clients), so a long one keeps its end.
        text = one_line(repr(str(path)), None)
        shown = text if len(text) <= _SHOWN_CHARS else "\u2026" + text[-(_SHOWN_CHARS - 1):]
        reason = e.strerror if isinstance(e, OSError) and e.strerror else one_line(str(e), 160)
        if route == "/save_datapoints":
            fix = "name a file in an existing folder inside --data_dir, with a short name"
        else:
            fix = "name a .lit.jsonl file that /save_datapoints wrote inside --data_dir"
        raise RequestError(f"{route} ?path= {shown}: {reason}. Fix: {fix}.") from None
