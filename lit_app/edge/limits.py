"""Request limits for the LIT server: prompt length, generation and IG / SmoothGrad sizes, and a bounded
number of compute requests at once.

`lit_app.edge.security.SecureApp` applies these to each HTTP request before LIT sees it (after
lit_app/edge/request_body.py has read the body within `Limits.max_body_bytes`):

* `validate_request`  a parsed JSON body and query of one LIT endpoint (else 400),
                      with messages that name the field, the limit and the flag.
* `ComputeSlots`      at most `Limits.max_pending` compute requests running or
                      waiting for the model; the next one gets 503 + Retry-After
                      (`needs_model`: requests that never wait for the model, the
                      tokenizer's and progress polls, are not counted).

A rejected request raises `Rejected(status, message)` (lit_app/errors.py); the message is one line.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from lit_nlp.api import types as lit_types

from sequence_salience.aggregate import PATTERN_BOUNDS, check_pattern
from sequence_salience.errors import SalienceError
from sequence_salience.field_rules import CURVE_STEPS, IG_TOLERANCE, MAX_NEW_TOKENS, FieldError, FieldRule, \
    distinct_names
from lit_app.schema import fields
from lit_app.errors import Rejected
from lit_app.schema.inputs import DETAIL_MODES
from lit_app.schema.method_registry import EXTRA_METHODS, SEGMENT_DETAIL, SEGMENT_KNOWN_DETAIL

# Largest --max_new_tokens the server accepts: the rule's `hi` (generation is one token at a time on
# the shared model; beyond this one request could hold the model for many minutes on CPU).
MAX_NEW_TOKENS_CAP = int(MAX_NEW_TOKENS.hi)

# LIT endpoints (lit_nlp/app.py, 1.3.1). Its client calls every one with POST.
API_PATHS = frozenset({
    "/get_info", "/get_dataset", "/create_dataset", "/create_model", "/get_generated",
    "/save_datapoints", "/load_datapoints", "/annotate_new_data", "/post_new_data",
    "/fetch_new_data", "/remove_new_data", "/push_ui_state", "/get_preds",
    "/get_interpretations", "/get_metrics",
})
# Endpoints that do not touch a model: never counted against `max_pending`.
CHEAP_PATHS = frozenset({"/get_info", "/get_dataset", "/fetch_new_data", "/remove_new_data", "/push_ui_state"})
# Query parameters LIT's client sends to /get_preds (plus LIT's own response_simple_json).
_GET_PREDS_PARAMS = frozenset({"model", "dataset_name", "requested_types", "requested_fields",
                               "response_simple_json"})
# Text inputs whose total length is bounded by `max_prompt_chars` ("foil": the explain module's
# contrastive target).
_TEXT_FIELDS = (fields.PROMPT, fields.SYSTEM, fields.TARGET, fields.FOIL)
_PINNED_TEXT_FIELDS = (fields.PINNED_PROMPT, fields.PINNED_SYSTEM, fields.PINNED_TARGET)
# A row's own response budget, and the pinned row's (the compare model): the rule's range (1 to 1,024);
# the server's --max_new_tokens caps it, it does not refuse it (lit_app/model/responses.py Responses.config_for),
# so a shipped row's budget (the chain-of-thought case's 192) works on a server with a lower flag.
_BUDGET_RULES = (MAX_NEW_TOKENS, dataclasses.replace(MAX_NEW_TOKENS, name=fields.PINNED_MAX_NEW_TOKENS))


# The bounds that are not a method's: (name, default, what it bounds); Limits adds one per counted method.
GENERAL_LIMITS: tuple[tuple[str, int, str], ...] = (
    ("max_body_bytes", 4 * 1024 * 1024, "largest request body (HTTP 413 beyond)."),
    ("max_prompt_chars", 32_000, "largest prompt + system + target of one input, in characters."),
    ("max_pending", 16, "compute requests running or waiting for the model at once (HTTP 503 beyond)."),
    ("retry_after_s", 2, "the Retry-After a 503 suggests."),
    ("max_connections", 64, "open connections at once, each served by a thread (security.BoundedThreadedServer)."),
    ("max_connections_per_client", 32, "open connections from one client address (at most max_connections)."),
)


def _check_limits(self) -> None:
    """Limits.__post_init__: every bound at least 1, a count's at most its rule's `hi`."""
    for field in dataclasses.fields(self):
        if getattr(self, field.name) < 1:
            raise ValueError(f"Limits.{field.name} is {getattr(self, field.name)}; it must be at least 1.")
    for extra in EXTRA_METHODS:  # one max_<count field> per counted method of the registry
        if getattr(self, extra.limit) > extra.maximum:
            raise ValueError(f"Limits.{extra.limit} is {getattr(self, extra.limit)}; the models accept at most"
                             f" {extra.maximum}.")


def _limits_class() -> type:
    """The frozen dataclass Limits: GENERAL_LIMITS, with each counted token method's max_<count field> (default:
    its rule's `hi`; the server flag of the same name, lit_app/edge/security_config.py) after max_prompt_chars."""
    counts = [(e.limit, e.maximum, f"largest {e.rule.help.split(':')[0]} {e.unit} count of a request.")
              for e in EXTRA_METHODS]
    rows = [*GENERAL_LIMITS[:2], *counts, *GENERAL_LIMITS[2:]]
    doc = ("Bounds on one request and on the work queued for the model.\n\n    Attributes:\n"
           + "".join(f"      {name}: {what}\n" for name, _, what in rows))
    return dataclasses.make_dataclass(
        "Limits", [(name, int, dataclasses.field(default=default)) for name, default, _ in rows], frozen=True,
        namespace={"__post_init__": _check_limits, "__doc__": doc, "__module__": __name__})


Limits = _limits_class()


def validate_example(data: Mapping[str, Any], limits: Limits, where: str) -> None:
    """Checks one model input ("data" of an input) against the limits; 400 on failure."""
    # The selected datapoint's texts, then (the compare model) the pinned one's: each within the limit.
    for group, label in ((_TEXT_FIELDS, "prompt + system + target (+ foil)"),
                         (_PINNED_TEXT_FIELDS, "pinned_prompt + pinned_system + pinned_target")):
        total = 0
        for name in group:
            value = data.get(name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise Rejected(400, f'{where}: field "{name}" must be a string, got {type(value).__name__}.')
            total += len(value)
        if total > limits.max_prompt_chars:
            raise Rejected(400, f"{where}: {label} is {total:,} characters; this server accepts"
                                f" up to {limits.max_prompt_chars:,} (--max_prompt_chars). Fix: shorten the prompt.")
    for extra in EXTRA_METHODS:  # 0 = off; the server's --max_<field> may lower the rule's `hi`
        _check_rule(data, extra.rule, where, getattr(limits, extra.limit), f"--{extra.limit}", off=True)
    for rule in _BUDGET_RULES:
        _check_rule(data, rule, where)
    for rule in fields.SEGMENT_COUNT_RULES.values():  # the surrogate's ablations
        _check_rule(data, rule, where)
    chat = data.get(fields.CHAT)
    if chat is not None and chat != "" and not isinstance(chat, bool) and str(chat).lower() not in ("true", "false"):
        raise Rejected(400, f'{where}: field "{fields.CHAT}" must be true or false, got {chat!r}.')
    for name in (fields.OLD_ANSWER, fields.WITH_PINNED_SALIENCE):  # read as `is True` by lit_app/wrappers/compare.py
        value = data.get(name)
        if value is not None and not isinstance(value, bool):
            raise Rejected(400, f'{where}: field "{name}" is {_shown(value)}; use true or false (JSON booleans).')
    for name in (fields.TARGET_SPAN, fields.DETAIL, fields.SPAN_JOB, fields.MATRIX_JOB):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise Rejected(400, f'{where}: field "{name}" must be a string, got {type(value).__name__}.')
    _validate_pattern(data, where)
    detail = data.get(fields.DETAIL)
    if detail is not None and detail not in DETAIL_MODES:
        raise Rejected(400, f'{where}: field "{fields.DETAIL}" is {_shown(detail)}; use one of'
                            f' {", ".join(repr(m) for m in DETAIL_MODES)}.')
    _validate_explain_fields(data, limits, where)


def _check_rule(data: Mapping[str, Any], rule: FieldRule, where: str, hi: int | float | None = None,
                flag: str | None = None, off: bool = False) -> None:
    """400 unless field `rule.name` is absent, "" or within its rule (`hi`: the server's limit, its `flag`)."""
    value = data.get(rule.name)
    if value is None or value == "":
        return
    try:
        rule.parse(value, hi=hi, off=off)
    except FieldError:
        fix = rule.allowed(hi, off) + (f" ({flag})" if flag else "")
        raise Rejected(400, f'{where}: field "{rule.name}" is {_shown(value)}; use {fix}.') from None


def _shown(value: Any, chars: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= chars else text[:chars] + "..."


def _validate_pattern(data: Mapping[str, Any], where: str) -> None:
    """The regex of granularity "regex" (segments, explanation tests, compare), checked before anything compiles
    it: the shared dialect and PATTERN_BOUNDS (sequence_salience/aggregate/patterns.py), so that a pattern the
    compiler would write out into gigabytes (`a{99999999}`) or recurse on (5,000 nested groups) is a 400."""
    pattern = data.get(fields.PATTERN)
    if pattern is None or pattern == "":
        return
    if not isinstance(pattern, str):
        raise Rejected(400, f'{where}: field "{fields.PATTERN}" must be a string, got {type(pattern).__name__}.')
    if data.get(fields.GRANULARITY) != "regex":
        # Unused (only regex segments read it), but never compiled later either: bounded in length only.
        if len(pattern) > PATTERN_BOUNDS.max_chars:
            raise Rejected(400, f'{where}: field "{fields.PATTERN}" is {len(pattern):,} characters long; at most'
                                f' {PATTERN_BOUNDS.max_chars:,} are allowed. Fix: shorten the pattern.')
        return
    try:
        check_pattern(pattern)
    except SalienceError as e:
        raise Rejected(400, f'{where}: field "{fields.PATTERN}": {e}') from None


def _validate_explain_fields(data: Mapping[str, Any], limits: Limits, where: str) -> None:
    """The explain model's inputs (lit_app/wrappers/explain.py), checked before it generates anything."""
    methods = data.get(fields.METHODS)
    if isinstance(methods, str):
        try:
            distinct_names([m.strip() for m in methods.split(",") if m.strip()])
        except FieldError as e:
            raise Rejected(400, f'{where}: field "{fields.METHODS}": {e} (a repeat is computed again). Fix: e.g.'
                                ' "grad_norm,leave_one_out".') from None
    action = data.get(fields.EXPLAIN_ACTION)
    if action is not None and action != "" and action not in fields.EXPLAIN_ACTIONS:
        raise Rejected(400, f'{where}: field "{fields.EXPLAIN_ACTION}" is {_shown(action)}; use one of'
                            f' {", ".join(fields.EXPLAIN_ACTIONS)}.')
    _check_rule(data, CURVE_STEPS, where)
    _check_rule(data, IG_TOLERANCE, where)


def _names(names: Callable[[], Collection[str]] | None) -> Collection[str] | None:
    return None if names is None else names()


def validate_request(
    path: str,
    query: Mapping[str, str],
    data: Any,
    limits: Limits,
    model_names: Callable[[], Collection[str]] | None = None,
    dataset_names: Callable[[], Collection[str]] | None = None,
    example_ids: Callable[[str], Collection[str]] | None = None,
) -> None:
    """Checks a LIT API request (path, query parameters, parsed JSON body); raises Rejected(400).

    Names of models and datasets are checked when `model_names` /
    `dataset_names` are given (callables, since LIT can add models at run time);
    example ids sent with `?dataset_name=` when `example_ids(dataset)` is given.
    """
    if data is not None and not isinstance(data, dict):
        raise Rejected(400, f"The request body must be a JSON object, got {type(data).__name__}.")
    if path == "/get_preds":
        unknown = sorted(set(query) - _GET_PREDS_PARAMS)
        if unknown:
            raise Rejected(400, f"Unknown query parameter(s) {', '.join(unknown)} for /get_preds; known:"
                                f" {', '.join(sorted(_GET_PREDS_PARAMS))}.")
        if not query.get("model"):
            raise Rejected(400, "No model named in the request. Fix: add ?model=<name> to /get_preds.")
        for type_name in filter(None, query.get("requested_types", "").split(",")):
            t = getattr(lit_types, type_name, None)
            if not (isinstance(t, type) and issubclass(t, lit_types.LitType)):
                raise Rejected(400, f"requested_types names {type_name!r}, which is not a LIT type.")
        if data is None or not isinstance(data.get("inputs"), list):
            raise Rejected(400, 'The request body must be JSON like {"inputs": [{"id": "...", "data":'
                                ' {"prompt": "..."}}]}.')
    if path == "/create_dataset" and not query.get("dataset_name"):  # LIT: "No base dataset specified." (500)
        raise Rejected(400, '/create_dataset needs ?dataset_name= naming the loader that reads "config". Fix: add'
                            ' ?dataset_name=<a loader that /get_info lists under "initSpecs">.')
    known_models = _names(model_names)
    model = query.get("model")
    if model and known_models is not None and model not in known_models:
        raise Rejected(400, f"Unknown model {model!r}. Fix: use one of {sorted(known_models)}.")
    known_datasets = _names(dataset_names)
    dataset = query.get("dataset_name")
    if (dataset and path != "/create_dataset"  # there dataset_name names a loader
            and known_datasets is not None and dataset not in known_datasets):
        raise Rejected(400, f"Unknown dataset {dataset!r}. Fix: use one of {sorted(known_datasets)}.")
    inputs = data.get("inputs") if isinstance(data, dict) else None
    if inputs is None:
        return
    if not isinstance(inputs, list):
        raise Rejected(400, f'"inputs" must be a list, got {type(inputs).__name__}.')
    for i, ex in enumerate(inputs):
        if path == "/post_new_data":  # there each input is the data itself
            if not isinstance(ex, dict):
                raise Rejected(400, f"inputs[{i}] must be an object, got {type(ex).__name__}.")
            validate_example(ex, limits, f"inputs[{i}]")
            if dataset:  # LIT 1.3.1's handler then reads each input as {"id", "data": {..., "_id"}} (a KeyError)
                if not isinstance(ex.get("data"), dict) or "id" not in ex:
                    raise Rejected(400, f'inputs[{i}] has no "id" and "data" object; with ?dataset_name= LIT reads'
                                        ' each input of /post_new_data as {"id": "<id>", "data": {..., "_id": "<the'
                                        ' same id>"}}. Fix: send that shape.')
                validate_example(ex["data"], limits, f"inputs[{i}].data")
                _same_ids(ex, ex["data"], i)  # LIT checks it too, and answered 500
            continue
        if isinstance(ex, str) and dataset:  # an example id, looked up in the dataset by LIT
            ids = example_ids(dataset) if example_ids is not None and path != "/create_dataset" else None
            if ids is not None and ex not in ids:
                raise Rejected(400, f"inputs[{i}] is the example id {_shown(ex)}, which dataset {dataset!r} does not"
                                    " have. Fix: send the example itself, {\"id\": ..., \"data\": {...}}.")
            continue
        if not isinstance(ex, dict):
            raise Rejected(400, f"inputs[{i}] must be an object like {{\"id\": \"...\", \"data\": {{...}}}},"
                                f" got {type(ex).__name__}.")
        ex_data = ex.get("data")
        if not isinstance(ex_data, dict):
            raise Rejected(400, f'inputs[{i}] has no "data" object. Fix: send {{"id": "...", "data": {{...}}}}.')
        validate_example(ex_data, limits, f"inputs[{i}]")
        if dataset and path != "/create_dataset":
            # LIT checks this for every request with ?dataset_name= (its IndexedInput) and answered 500.
            _same_ids(ex, ex_data, i)


def _same_ids(ex: Mapping[str, Any], ex_data: Mapping[str, Any], i: int) -> None:
    if ex.get("id") != ex_data.get("_id"):
        raise Rejected(400, f'inputs[{i}] has "id" {_shown(ex.get("id"))} but "data"."_id"'
                            f' {_shown(ex_data.get("_id"))}; with ?dataset_name= both must be the same id.')


# Input values that only read or cancel a background job, without the model: the salience
# model's progress poll (lit_app/wrappers/salience.py) and the explain module's status/cancel (lit_app/wrappers/explain.py).
# A segment request (method_registry.SEGMENT_DETAIL) starts or finds a background job and never waits either;
# "page_closed" only cancels; SEGMENT_KNOWN_DETAIL only reads the cache.
_POLL_VALUES = {"detail": ("poll", "stream", "span_progress", "span_cancel", "matrix_cancel", "page_closed",
                           SEGMENT_DETAIL, SEGMENT_KNOWN_DETAIL),
                "explain_action": ("status", "cancel")}


def _polls(ex: Any) -> bool:
    data = ex.get("data") if isinstance(ex, dict) else None
    return isinstance(data, dict) and any(data.get(k) in values for k, values in _POLL_VALUES.items())


def is_poll(path: str, data: Any) -> bool:
    """True for a /get_preds request whose every input only polls or cancels a background job.

    Those need no model, so they are not counted against `max_pending`: the
    progress of a long job stays visible, and it stays cancellable, while the
    server is full.
    """
    inputs = data.get("inputs") if path == "/get_preds" and isinstance(data, dict) else None
    return bool(inputs) and all(_polls(ex) for ex in inputs)


def needs_model(path: str, query: Mapping[str, str], data: Any,
                model_free_names: Callable[[], Collection[str]] | None = None) -> bool:
    """Whether a request may wait for the model, and so counts against `max_pending`.

    Not counted: LIT's metadata routes (`CHEAP_PATHS`), progress polls (`is_poll`), and /get_preds of
    a model that never waits for it (`model_free_names()`: the tokenizer, which uses the tokenizer
    copy), so those are answered while the model queue is full.
    """
    if path in CHEAP_PATHS or is_poll(path, data):
        return False
    if path == "/get_preds" and model_free_names is not None and query.get("model") in model_free_names():
        return False
    return True


class ComputeSlots:
    """A bounded count of compute requests running or waiting for the model.

    `try_acquire` never blocks: a full server answers at once (503) instead of
    queueing without bound.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity is {capacity}; it must be at least 1.")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._in_use = 0
        self.peak = 0
        self.rejected = 0

    @property
    def in_use(self) -> int:
        return self._in_use

    def try_acquire(self) -> bool:
        with self._lock:
            if self._in_use >= self.capacity:
                self.rejected += 1
                return False
            self._in_use += 1
            self.peak = max(self.peak, self._in_use)
            return True

    def release(self) -> None:
        with self._lock:
            if self._in_use <= 0:
                raise RuntimeError("ComputeSlots.release() without a matching try_acquire().")
            self._in_use -= 1

    def busy_error(self, retry_after_s: int) -> Rejected:
        return Rejected(
            503,
            f"The server is busy: {self.capacity} request(s) are already running or waiting for the model"
            f" (--max_pending_requests). Retry in {retry_after_s} s.",
            (("Retry-After", str(retry_after_s)),),
        )
