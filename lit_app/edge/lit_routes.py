"""LIT 1.3.1's own routes: the client mistakes they would answer with HTTP 500, as 4xx that name the fix.

LIT's handlers raise `ValueError` / `KeyError` / `RuntimeError` for the client's mistakes (an unknown
saved-data id, a missing config key, an unknown loader, `/push_ui_state` on a server without UI-state
sync) and its WSGI app answers every exception with 500 and a traceback. `lit_app.edge.security.SecureApp`
applies the two halves of this module:

* `check_request`   before LIT runs: the request body's LIT-encoded objects (LIT decodes any JSON
                    object with a "__class__" or "__name__" key as a Python value; one that does not
                    decode raised inside LIT), the `config` of /create_dataset and /create_model, and
                    the "inputs" list of the routes that read one.
* `client_mistake`  after LIT answered 500: its error message, when it is one of LIT's checks of the
                    request (`LIT_MISTAKES`), rewritten with the field and the fix, and its 4xx status.

A rejected request raises `Rejected(status, message)` (lit_app/errors.py); the message is one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from lit_nlp.lib import serialize

from lit_app.errors import Rejected, one_line

# JSON keys LIT's decoder (lit_nlp.lib.serialize.from_json) reads as an encoded Python value.
LIT_ENCODING_KEYS = ("__class__", "__name__")
# Routes that create a dataset or model from a client `config`.
CONFIG_ROUTES = frozenset({"/create_dataset", "/create_model"})
# Routes whose LIT handler reads the body's "inputs" list (a KeyError in LIT without it).
INPUT_ROUTES = frozenset({"/get_preds", "/annotate_new_data", "/post_new_data", "/save_datapoints",
                          "/get_interpretations", "/get_metrics", "/get_generated", "/push_ui_state"})
_SHOWN_CHARS = 60

# (pattern of LIT 1.3.1's message, HTTP status, our message: the field and the fix; {names} from the pattern).
# A KeyError's message comes quoted (its repr); `client_mistake` takes the quotes off first.
LIT_MISTAKES: tuple[tuple[str, int, str], ...] = (
    (r"No saved data with ID: (?P<id>.*)", 404,
     "No saved datapoints with id {id!r} (?saved_datapoints_id=): this server never saved them, removed them, or"
     " restarted since (it keeps them in memory). Fix: POST them to /post_new_data and use the id it answers."),
    (r"Attempted to push UI state, but that is not enabled for this server\.", 403,
     "/push_ui_state is off on this server: LIT's UI-state sync runs only in a notebook widget started with"
     " sync_state. Fix: do not call it; the page works without it."),
    (r"No loader information \(Cls \+ init_spec\) found for (?P<name>.*)", 400,
     "This server has no loader named {name!r} (?dataset_name= of /create_dataset, ?model_name= of"
     " /create_model). Fix: use one that /get_info lists under \"initSpecs\"."),
    (r"No name provided for the new (?P<what>dataset|model)\.", 400,
     "config \"new_name\" is missing. Fix: add \"new_name\": \"<a name for the new {what}>\" to \"config\"."),
    (r"(?P<loader>.+) received unsupported params: (?P<params>.*)", 400,
     "config has parameter(s) {params} that {loader} does not take. Fix: send only the parameters /get_info"
     " lists for it under \"initSpecs\"."),
    (r"(?P<loader>.+) missing required params: (?P<params>.*)", 400,
     "config lacks the required parameter(s) {params} of {loader}. Fix: add them (see \"initSpecs\" in"
     " /get_info)."),
    (r"Metrics cannot be computed without inputs\.", 400,
     "/get_metrics needs at least one input. Fix: send \"inputs\": [...] with the datapoints to score."),
    (r"Requested unknown metrics \"?(?P<names>.*?)\"?\.", 400,
     "Unknown metrics {names} (?metrics=). Fix: use names that /get_info lists under \"metrics\"."),
    (r"Model\(s\) already exist: (?P<names>.*)\.", 409,
     "Model(s) {names} already exist. Fix: choose another config \"new_name\"."),
    (r"No config specified\.", 400,
     "The request body has no \"config\". Fix: send {{\"config\": {{\"new_name\": \"<a name>\", ...}}}} with the"
     " parameters /get_info lists under \"initSpecs\"."),
    (r"Failed to parse LitType from .*", 400,
     "The request body has an object with a \"__name__\" key that is not a LIT type. Fix: rename the key."),
)
_COMPILED = tuple((re.compile(pattern, re.DOTALL), status, text) for pattern, status, text in LIT_MISTAKES)


def client_mistake(message: str) -> tuple[int, str] | None:
    """(status, message naming the field and fix) when LIT's error `message` is a client mistake, else None."""
    message = message.strip()
    if len(message) >= 2 and message[0] == message[-1] and message[0] in "'\"":  # str(KeyError(...))
        message = message[1:-1].replace("\\'", "'")
    for pattern, status, text in _COMPILED:
        m = pattern.fullmatch(message)
        if m is not None:
            shown = {k: _shown(v) if k == "id" else one_line(v, _SHOWN_CHARS) for k, v in m.groupdict().items()}
            return status, text.format(**shown)
    return None


def _shown(value: str) -> str:
    return value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "..."


def _encoded_objects(value: Any, where: str) -> Iterator[tuple[str, dict]]:
    """(location, object) of every JSON object with a LIT encoding key, innermost first."""
    stack: list[tuple[Any, str, bool]] = [(value, where, False)]
    while stack:  # iterative: the body nests at most request_body.MAX_JSON_DEPTH deep, but never recurse
        v, at, children_done = stack.pop()
        if isinstance(v, dict):
            if children_done:
                if any(k in v for k in LIT_ENCODING_KEYS):
                    yield at, v
                continue
            stack.append((v, at, True))
            stack.extend((c, f"{at}.{k}" if at else str(k), False) for k, c in v.items())
        elif isinstance(v, list):
            stack.extend((c, f"{at}[{i}]", False) for i, c in enumerate(v))


def check_lit_encoding(data: Any) -> None:
    """Rejected(400) when an object of the body has a "__class__" / "__name__" key that LIT cannot decode.

    LIT decodes {"__class__": "tuple" | "np.ndarray", "__value__": [...]} and {"__name__": <LIT type>, ...}
    as Python values; any other object with those keys raised inside LIT (500).
    """
    for at, obj in _encoded_objects(data, ""):
        try:
            serialize.from_json(json.dumps(obj))
        except Exception as e:  # pylint: disable=broad-except  # whatever LIT's decoder raises
            key = next(k for k in LIT_ENCODING_KEYS if k in obj)
            reason = one_line(f"{type(e).__name__}: {e}", _SHOWN_CHARS)
            raise Rejected(400, f"{at or 'The body'}: an object with a \"{key}\" key is read by LIT as an encoded"
                                f" Python value, and this one does not decode ({reason}). Fix: rename the key, or"
                                " send LIT's encoding ({\"__class__\": \"tuple\", \"__value__\": [...]}).") from None


def check_config(path: str, data: Any) -> None:
    """Rejected(400) for a /create_dataset or /create_model `config` LIT would fail on (not an object,
    "new_name" not a non-empty string)."""
    if path not in CONFIG_ROUTES or not isinstance(data, dict) or "config" not in data:
        return
    config = data["config"]
    what = "dataset" if path == "/create_dataset" else "model"
    if not isinstance(config, dict):
        raise Rejected(400, f'"config" must be an object like {{"new_name": "<a name for the new {what}>", ...}},'
                            f" got {type(config).__name__}.")
    new_name = config.get("new_name")
    if new_name is not None and not (isinstance(new_name, str) and new_name.strip()):
        raise Rejected(400, f'config "new_name" is {_shown(repr(new_name))}; use a non-empty string naming the new'
                            f" {what}.")


def check_inputs(path: str, data: Any) -> None:
    """Rejected(400) when a route that reads "inputs" gets a body without that list."""
    if path in INPUT_ROUTES and not (isinstance(data, dict) and isinstance(data.get("inputs"), list)):
        raise Rejected(400, f'{path} reads the datapoints from "inputs", and the request body has no such list.'
                            ' Fix: send JSON like {"inputs": [{"id": "...", "data": {"prompt": "..."}}]}.')


def check_request(path: str, data: Any) -> None:
    """The checks LIT's own routes need before LIT runs (module docstring); Rejected(400) on failure."""
    check_lit_encoding(data)
    check_config(path, data)
    check_inputs(path, data)
