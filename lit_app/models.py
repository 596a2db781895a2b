"""Thin LIT model wrappers over `sequence_salience`, sharing one loaded model.

Three LIT models share one `SharedLM` (one set of weights, one model lock, a
tokenizer copy under its own lock, LRU caches):

* `GenerationModel`  prompt -> response (greedy) and its tokens.
* `SalienceModel`    prompt + target -> the salience payload of
  docs/architecture.md, LIT-native `SequenceSalienceMap`s, tokens, and the
  exact salience of a target span on request.
* `TokenizerModel`   prompt + target -> the tokens the salience model explains.

`make_models` names them after LIT's convention: `name`, `_name_salience`,
`_name_tokenizer` (see `fields.model_group_names`).

Errors: every bad input (and every `SalienceError` from the core library) is
logged and re-raised as `RequestError`, a `ValueError` whose message is one
line. LIT's server turns it into HTTP 500 with body
"Uncaught error: <message>\\n\\nDetails: <traceback>", and LIT's client shows
<message> only when it is a single line (otherwise "Unknown error").
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Callable

import numpy as np
from lit_nlp.api import dtypes as lit_dtypes
from lit_nlp.api import model as lit_model
from lit_nlp.api import types as lit_types

import sequence_salience as ss
from sequence_salience.slices import DEFAULT_SLICE_S
from lit_app import disconnect, fields, generation_cache, progressive
from lit_app.scheduler import ModelScheduler

logger = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 64
MAX_IG_STEPS = 256
MAX_SMOOTH_GRAD_SAMPLES = 256
# Largest packed Gram payload shipped to the client (floats); beyond it the
# client asks for spans with `target_span` instead.
MAX_GRAM_PACKED_VALUES = 2_000_000
SIGNIFICANT_DIGITS = 6
_CACHE_SIZE = 32
# Salience results are cached up to this many bytes (a 4,000-token result with
# its Gram tensor is hundreds of MB).
DEFAULT_CACHE_BYTES = 2 * 1024**3

JsonDict = Mapping[str, Any]


class RequestError(ValueError):
    """A request the wrappers cannot serve; the message is one line and names the fix."""


class ClientGone(RequestError):
    """A request stopped because its HTTP client disconnected: nobody reads the answer."""


def _log_progress(every_s: float = 2.0) -> Callable[[str, int, int], None]:
    """A compute_salience progress callback that logs at most every `every_s` seconds (and at the end)."""
    import time

    last = [time.monotonic()]

    def report(method: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= every_s:
            last[0] = now
            logger.info("salience %s: %d/%d", method, done, total)

    return report


def _one_line(message: str) -> str:
    return re.sub(r"\s*\n\s*", " ", message).strip()


def nbytes(value: Any) -> int:
    """Approximate memory held by a cached value: its numpy arrays (recursively) plus 1 KiB."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    total = 1024
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value) if len(value) < 64 else []
        total += 16 * len(value)
    else:
        return total
    for item in items:
        if isinstance(item, (np.ndarray, Mapping, list, tuple)) or dataclasses.is_dataclass(item):
            total += nbytes(item)
    return total


class _LRU:
    """A small thread-safe LRU cache, bounded by entry count and by bytes (`nbytes`)."""

    def __init__(self, size: int, max_bytes: int | None = None):
        self._size = size
        self._max_bytes = max_bytes
        self._bytes: dict[Hashable, int] = {}
        self._d: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            if key not in self._d:
                return None
            self._d.move_to_end(key)
            return self._d[key]

    def put(self, key: Hashable, value: Any) -> None:
        size = nbytes(value) if self._max_bytes is not None else 0
        with self._lock:
            self._d[key] = value
            self._bytes[key] = size
            self._d.move_to_end(key)
            while len(self._d) > self._size or (
                    self._max_bytes is not None and len(self._d) > 1 and self.total_bytes > self._max_bytes):
                old, _ = self._d.popitem(last=False)
                self._bytes.pop(old, None)

    def items(self) -> list[tuple[Hashable, Any]]:
        """A snapshot of (key, value), oldest first; does not touch the order."""
        with self._lock:
            return list(self._d.items())

    @property
    def total_bytes(self) -> int:
        return sum(self._bytes.values())

    def __len__(self) -> int:
        return len(self._d)


# The model lock: interactive requests before background slices (lit_app/scheduler.py).
# `FairLock` is its former name (a lock granted in arrival order, without priorities).
FairLock = ModelScheduler


@dataclasses.dataclass(frozen=True)
class ExtraMethod:
    """A method computed only when a request asks for it, with a count (0 = off).

    Attributes:
      method: the core library's name.
      field: the input field carrying the count; also the `SalienceConfig` attribute it sets.
      kind: the background job's kind prefix; the job of count n is f"{kind}{n}".
      matrix_detail: the `detail` value that starts its per-token matrix job.
      unit: what the count counts; the payload key of its method entry.
      maximum: the largest count a request may ask for.
    """

    method: str
    field: str
    kind: str
    matrix_detail: str
    unit: str
    maximum: int


EXTRA_METHODS: tuple[ExtraMethod, ...] = (
    ExtraMethod(fields.IG_METHOD, fields.IG_STEPS, "ig", "ig_matrix", "steps", MAX_IG_STEPS),
    ExtraMethod(fields.SMOOTH_GRAD_METHOD, fields.SMOOTH_GRAD_SAMPLES, "sg", "smooth_grad_matrix", "samples",
                MAX_SMOOTH_GRAD_SAMPLES),
)
_EXTRA_BY_METHOD = {e.method: e for e in EXTRA_METHODS}


def _method_signed(name: str) -> bool:
    return bool(ss.get_method(name).signed)


def compact(a: np.ndarray, digits: int = SIGNIFICANT_DIGITS) -> list:
    """Nested lists of floats rounded to `digits` significant digits (short JSON)."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.where(a == 0, 0.0, np.floor(np.log10(np.abs(a))))
        scale = np.power(10.0, digits - 1 - mag)
        out = np.where(np.isfinite(a) & (a != 0), np.round(a * scale) / scale, a)
    return np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0).tolist()


def pack_gram(gram: np.ndarray) -> np.ndarray:
    """<float>[N, T, T] -> <float>[N, T*(T+1)/2]: upper triangle, row-major ((0,0),(0,1),..,(1,1),..)."""
    t = gram.shape[-1]
    rows, cols = np.triu_indices(t)
    return gram[:, rows, cols]


def _span_key(t0: int, t1: int) -> str:
    return f"{int(t0)}:{int(t1)}"


def salience_payload(result: Any, ig_steps: int, methods: Iterable[str] | None = None,
                     detail: Mapping[str, Any] | None = None, dtype: str = "",
                     smooth_grad_samples: int = 0) -> JsonDict:
    """The `salience` field: exactly the payload of docs/architecture.md.

    A partial result (spans computed directly, no matrices yet) gives `"matrix": null`
    for its methods and carries its values under "spans"; `detail` says how far the
    background computation of the matrices has come. `ig_steps` and `smooth_grad_samples`
    are the counts the IG and SmoothGrad entries carry ("steps", "samples").
    """
    counts = {fields.IG_STEPS: ig_steps, fields.SMOOTH_GRAD_SAMPLES: smooth_grad_samples}
    spans = getattr(result, "spans", {}) or {}
    names = list(methods) if methods is not None else list(result.matrices)
    for m in (m for v in spans.values() for m in v):
        if m not in names:
            names.append(m)
    out_methods: JsonDict = {}
    for name in names:
        matrix = result.matrices.get(name)
        entry: JsonDict = {"signed": _method_signed(name), "matrix": None if matrix is None else compact(matrix)}
        if name == fields.GRAD_NORM_METHOD:
            gram = getattr(result, "grad_gram", None)
            packed = None
            if matrix is not None and gram is not None:
                n_tokens, n_targets = matrix.shape[1], matrix.shape[0]
                if n_tokens * n_targets * (n_targets + 1) // 2 <= MAX_GRAM_PACKED_VALUES:
                    packed = compact(pack_gram(np.asarray(gram)))
            entry["gram_packed"] = packed
        extra = _EXTRA_BY_METHOD.get(name)
        if extra is not None:
            entry[extra.unit] = int(counts[extra.field])
        if name == fields.IG_METHOD:
            err = getattr(result, "ig_completeness_error", None)
            entry["completeness_error"] = None if err is None or matrix is None else compact(err)
        out_methods[name] = entry
    payload = {
        "text": result.text,
        "prompt_end": int(result.prompt_end),
        "tokens": list(result.tokens),
        "offsets": np.asarray(result.offsets, dtype=np.int64).reshape(-1, 2).tolist(),
        "special": [bool(s) for s in result.special],
        "n_prompt_tokens": int(result.n_prompt_tokens),
        "role_spans": [[int(s), int(e), str(r)] for s, e, r in result.role_spans],
        "target_logprobs": compact(result.target_logprobs),
        "methods": out_methods,
        "spans": {_span_key(*k): {m: compact(v) for m, v in vals.items()} for k, vals in spans.items()},
        "span_ig_errors": {_span_key(*k): float(v) for k, v in (getattr(result, "span_ig_errors", {}) or {}).items()},
    }
    if detail is not None:
        payload["detail"] = dict(detail)
    if dtype:
        payload["dtype"] = dtype
    return payload


# ---------------------------------------------------------------------------
# Input parsing shared by the wrappers.


def _text_field(ex: JsonDict, name: str, required: bool = False) -> str:
    value = ex.get(name)
    if value is None:
        if required:
            raise RequestError(
                f'Input field "{name}" is missing. Fix: send {{"{name}": "..."}} in each input.'
            )
        return ""
    if not isinstance(value, str):
        raise RequestError(f'Input field "{name}" must be a string, got {type(value).__name__}.')
    return value


def _chat_field(ex: JsonDict) -> bool | None:
    value = ex.get(fields.CHAT)
    if value is None or value == "":
        return None  # the core library decides: the chat template when there is one
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise RequestError(f'Input field "{fields.CHAT}" must be true or false, got {value!r}.')


def _count_field(ex: JsonDict, extra: ExtraMethod) -> int:
    """The count of an extra method's input field (ig_steps, smooth_grad_samples); absent or "" -> 0 (off)."""
    value = ex.get(extra.field)
    if value is None or value == "":
        return 0
    fix = f"use a whole number from 0 (off) to {extra.maximum}"
    try:
        count = float(value)
    except (TypeError, ValueError):
        raise RequestError(f'Input field "{extra.field}" must be a whole number, got {value!r}; {fix}.') from None
    if count != int(count) or not 0 <= count <= extra.maximum:
        raise RequestError(f'Input field "{extra.field}" is {value!r}; {fix}.')
    return int(count)


def extra_counts(ex: JsonDict) -> dict[str, int]:
    """{count field: count} for every extra method, e.g. {"ig_steps": 16, "smooth_grad_samples": 0}."""
    return {extra.field: _count_field(ex, extra) for extra in EXTRA_METHODS}


DETAIL_MODES = ("", "span", "poll", "stream") + tuple(e.matrix_detail for e in EXTRA_METHODS)


def _detail_field(ex: JsonDict) -> str:
    value = ex.get(fields.DETAIL)
    if value is None:
        return ""
    if not isinstance(value, str) or value not in DETAIL_MODES:
        matrices = " or ".join(f'"{e.matrix_detail}"' for e in EXTRA_METHODS)
        raise RequestError(
            f'Input field "{fields.DETAIL}" is {value!r}; use one of "" (all matrices at once),'
            f' "span" (first highlight), "poll" (progress of the matrices), "stream" (the response generated so far)'
            f" or {matrices}."
        )
    return value


def _job_extra(counts: Mapping[str, int], detail: str) -> ExtraMethod | None:
    """The extra method whose background job a "poll" or "<method>_matrix" request is about; None: the gradients."""
    if detail != "poll":
        extra = next(e for e in EXTRA_METHODS if e.matrix_detail == detail)
        if not counts[extra.field]:
            raise RequestError(f'"{detail}" needs "{extra.field}" > 0 (the number of {extra.unit}).')
        return extra
    asked = [e for e in EXTRA_METHODS if counts[e.field]]
    if len(asked) > 1:
        names = " and ".join(f'"{e.field}"' for e in asked)
        raise RequestError(f'A "poll" request follows one job, but {names} are both > 0.'
                           " Fix: send only the count of the method whose matrix you poll (0 or absent for the others).")
    return asked[0] if asked else None


def parse_target_span(value: Any, n_targets: int) -> tuple[int, int] | None:
    """Parses "t0:t1" (target-token indices, end exclusive); "" or None -> None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(value))
    if not m:
        raise RequestError(
            f'Input field "{fields.TARGET_SPAN}" is {value!r}; write "t0:t1" with target-token'
            f" indices, e.g. \"0:{max(n_targets, 1)}\"."
        )
    t0, t1 = int(m.group(1)), int(m.group(2))
    if not 0 <= t0 < t1 <= n_targets:
        if t0 >= t1:  # the length may not be known yet (a progressive span: checked once tokenized)
            raise RequestError(f'Input field "{fields.TARGET_SPAN}" is "{t0}:{t1}"; the end must be after the'
                               f' start: use t0 < t1, e.g. "{t0}:{t0 + 1}".')
        raise RequestError(
            f'Input field "{fields.TARGET_SPAN}" is "{t0}:{t1}" but the target has {n_targets}'
            f" token(s); use 0 <= t0 < t1 <= {n_targets}."
        )
    return t0, t1


def _tokenizer_twin(lm: Any, model_lock: ModelScheduler) -> tuple[Any, Any]:
    """(a LanguageModel sharing `lm`'s weights with its own copy of the tokenizer, the lock that copy is
    used under); (lm, model_lock) when the tokenizer cannot be copied or `lm` is not a dataclass."""
    if not dataclasses.is_dataclass(lm) or getattr(lm, "tokenizer", None) is None:
        return lm, model_lock
    try:
        twin = dataclasses.replace(lm, tokenizer=copy.deepcopy(lm.tokenizer))
    except Exception as e:  # pylint: disable=broad-except
        logger.warning("Cannot copy the tokenizer (%s: %s); token-only requests wait for the model.",
                       type(e).__name__, e)
        return lm, model_lock
    return twin, threading.Lock()


class BlockingCancel:
    """When a blocking request (every matrix at once, `detail=""`) stops, within one slice.

    It stops when its HTTP client has disconnected (`lit_app.disconnect`: the page was
    closed, a script was interrupted or timed out), or when the user selected another
    datapoint after it arrived (the progressive focus moved, as it stops background jobs).
    Concurrent blocking requests do not stop each other: scripts may send several at once.
    `reason` says why it stopped ("" while it runs).
    """

    CLIENT_GONE = "the client disconnected"

    def __init__(self, jobs: progressive.DetailJobs, group: Hashable, gone: Callable[[], bool]):
        self._jobs, self._group, self._gone = jobs, group, gone
        self._focus = jobs.focus_group
        self.reason = ""

    def __call__(self) -> bool:
        if not self.reason:
            focus = self._jobs.focus_group
            if focus != self._focus and focus != self._group:
                self.reason = "another datapoint was selected"
            elif self._gone():
                self.reason = self.CLIENT_GONE
        return bool(self.reason)


@dataclasses.dataclass(frozen=True)
class GenerationStream:
    """A greedy response as far as it is generated: `detail="stream"` (docs/architecture.md)."""

    state: str  # "none" | "queued" | "running" | "done"
    text: str = ""
    tokens: int = 0
    stopped_by: str = ""  # "eos" | "length" once done

    def as_dict(self, max_new_tokens: int) -> JsonDict:
        return {"state": self.state, "text": self.text, "tokens": self.tokens, "max_new_tokens": max_new_tokens,
                "stopped_by": self.stopped_by}


class SharedLM:
    """One loaded `sequence_salience` LanguageModel shared by all wrappers.

    `lock` (a `ModelScheduler`, lit_app/scheduler.py) serializes every use of the
    model (generation, salience and the tokenization they do), so concurrent LIT
    requests queue instead of interfering; what a person waits for (`with lock:`)
    goes before background work (`with lock.background():`), which holds it one
    time slice at a time (`slice_s`): the matrix jobs (`jobs`, lit_app/progressive.py),
    blocking every-matrix requests, explanation tests, the value-index build.

    Requests that only need tokens (`format_prompt`, `tokens`: the tokenizer
    model, and the first step of every other request) do not wait for it: they
    use a copy of the tokenizer under `tokenizer_lock`. A fast (Rust) tokenizer
    is not safe to use from several threads at once ("Already borrowed"), so
    each tokenizer object is only ever used under its own lock: the model's
    under `lock`, the copy under `tokenizer_lock`. A tokenizer that cannot be
    copied falls back to the model's, under `lock`.
    """

    def __init__(
        self,
        lm: Any,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        salience_config: Any = None,
        cache_size: int = _CACHE_SIZE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        disk_cache: bool | str = True,
        heartbeat_s: float = progressive.DEFAULT_HEARTBEAT_S,
        slice_s: float = DEFAULT_SLICE_S,
    ):
        """Args:
          lm: a loaded `sequence_salience.LanguageModel`.
          max_new_tokens: longest greedy response.
          salience_config: base `SalienceConfig` (ig_steps and smooth_grad_samples come from
            each request; the other settings, e.g. SmoothGrad's noise and seed, from here).
          cache_size: how many generations and salience results to keep in memory.
          cache_bytes: most bytes of salience results kept in memory.
          disk_cache: keep generations on disk (True: under the library's cache dir;
            a path: there; False: memory only), so a restarted server shows them at once.
          heartbeat_s: a background job nobody polls for this long is cancelled.
          slice_s: model time of one background slice (seconds): every-matrix computations
            run in slices of about this long and let waiting clicks have the model between
            them (sequence_salience/slices.py, lit_app/scheduler.py).
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}; it must be at least 1.")
        self.lm = lm
        self.salience_config = salience_config if salience_config is not None else ss.SalienceConfig()
        self.generation_config = ss.GenerationConfig(max_new_tokens=max_new_tokens)
        if not slice_s > 0:
            raise ValueError(f"slice_s={slice_s}; it must be a positive number of seconds (e.g. 0.4).")
        self.slice_s = float(slice_s)
        self.lock = ModelScheduler()
        self._tokenizer_lm, self.tokenizer_lock = _tokenizer_twin(lm, self.lock)
        self.jobs = progressive.DetailJobs(heartbeat_s=heartbeat_s)
        self._generations = _LRU(cache_size)
        self._results = _LRU(cache_size, cache_bytes)
        self._partials = _LRU(cache_size, cache_bytes)
        self._tickets: dict[Hashable, int] = {}
        self._tickets_lock = threading.Lock()
        # Generations waiting for the model or running, by generation key (generation_stream).
        self._streams: dict[Hashable, GenerationStream] = {}
        self._streams_lock = threading.Lock()
        self._store = None
        if disk_cache:
            self._store = generation_cache.GenerationStore(lm, None if disk_cache is True else disk_cache)

    @property
    def name(self) -> str:
        return str(getattr(self.lm, "name", "model"))

    def next_span_ticket(self, group: Hashable) -> int:
        """A new number for a clicked-span request of `group`; older ones become stale."""
        with self._tickets_lock:
            self._tickets = {group: self._tickets.get(group, 0) + 1}  # other groups are stale anyway
            return self._tickets[group]

    def span_ticket(self, group: Hashable) -> int:
        return self._tickets.get(group, 0)

    @property
    def dtype(self) -> str:
        return str(getattr(self.lm, "dtype", "")).replace("torch.", "")

    def format_prompt(self, ex: JsonDict) -> Any:
        """The model input (a `ChatPrompt`) for an input example."""
        prompt = _text_field(ex, fields.PROMPT, required=True)
        if not prompt.strip():
            raise RequestError("The prompt is empty. Fix: type a prompt in the editor, then add it.")
        system = _text_field(ex, fields.SYSTEM) or None
        with self.tokenizer_lock:
            return self._tokenizer_lm.format_prompt(prompt, system=system, chat=_chat_field(ex))

    def blocking_cancel(self, ex: JsonDict) -> "BlockingCancel":
        """The cancel check of a blocking (`detail=""`) request for `ex`, made when it arrives."""
        return BlockingCancel(self.jobs, SalienceModel._group(ex), disconnect.watcher())

    def _generation_key(self, chat: Any) -> tuple:
        return (chat.text, getattr(chat, "templated", True), self.generation_config)

    def cached_generation(self, chat: Any) -> Any:
        """The generation if it was computed before (memory, then disk), else None; never runs the model."""
        key = self._generation_key(chat)
        gen = self._generations.get(key)
        if gen is None and self._store is not None:
            gen = self._store.get(*key)
            if gen is not None:
                self._generations.put(key, gen)
        return gen

    def generate(self, chat: Any) -> Any:
        """Greedy generation for a formatted prompt, cached by its text (in memory and on disk).

        While it waits for the model and while it runs, the text generated so far is readable
        without the model lock (`generation_stream`).
        """
        gen = self.cached_generation(chat)
        if gen is None:
            key = self._generation_key(chat)
            self._set_stream(key, GenerationStream("queued"))
            try:
                with self.lock:
                    gen = self.cached_generation(chat)
                    if gen is None:
                        self._set_stream(key, GenerationStream("running"))
                        start = time.perf_counter()
                        gen = self.lm.generate(chat, self.generation_config, on_token=lambda ids: self._stream_token(key, ids))
                        logger.info("Generated %d tokens in %.2f s.", len(gen.ids), time.perf_counter() - start)
                        self._generations.put(key, gen)
                        if self._store is not None:
                            self._store.put(*key, gen)
            finally:
                with self._streams_lock:
                    self._streams.pop(key, None)  # the cached generation answers from now on
        return gen

    def _stream_token(self, key: Hashable, ids: tuple[int, ...]) -> None:
        """Publishes the response so far. On the generating thread (it holds the model lock, so the
        model's tokenizer is free); a character whose bytes are not all generated yet (U+FFFD at the
        end) is left out until it is complete, so the text only ever grows."""
        text = ss.model.decode_text(self.lm.tokenizer, ids).rstrip("\ufffd")
        self._set_stream(key, GenerationStream("running", text, len(ids)))

    def _set_stream(self, key: Hashable, stream: "GenerationStream") -> None:
        with self._streams_lock:
            self._streams[key] = stream

    def generation_stream(self, chat: Any) -> "GenerationStream":
        """The greedy response of `chat` so far (the `detail="stream"` answer); never waits for the model.

        state "done": the whole generation (cached); "running": the text of the tokens generated so
        far; "queued": a request for it waits for the model; "none": nobody asked for it.
        """
        gen = self.cached_generation(chat)
        if gen is not None:
            return GenerationStream("done", gen.text, len(gen.ids), gen.stopped_by)
        with self._streams_lock:
            return self._streams.get(self._generation_key(chat)) or GenerationStream("none")

    def _explained(self, chat: Any, target: str) -> Any:
        """The target to explain: the typed text, or the greedy Generation (its ids used as they are)."""
        if target:
            return target
        gen = self.generate(chat)
        if not gen.ids:
            raise RequestError(
                "The model generated an empty response, so there is nothing to explain."
                " Fix: type a target text to explain, or change the prompt."
            )
        return gen

    def _methods_and_config(self, ig_steps: int, smooth_grad_samples: int = 0) -> tuple[tuple[str, ...], Any]:
        """The gradient methods plus each extra method whose count is > 0; the config with those counts.

        The config is part of every cache key, so results with other counts are kept apart; the
        other SmoothGrad settings (noise, seed) come from the server's `salience_config`.
        """
        counts = {fields.IG_STEPS: ig_steps, fields.SMOOTH_GRAD_SAMPLES: smooth_grad_samples}
        methods = [fields.GRAD_NORM_METHOD, fields.GRAD_X_INPUT_METHOD]
        config = self.salience_config
        for extra in EXTRA_METHODS:
            if counts[extra.field] > 0:
                methods.append(extra.method)
                config = dataclasses.replace(config, **{extra.field: int(counts[extra.field])})
        available = set(ss.list_methods())
        return tuple(m for m in methods if m in available), config

    def _pair_key(self, chat: Any, target: str, explained: Any) -> tuple:
        target_key = ("typed", target) if target else ("generated", explained.ids)
        return (chat.text, getattr(chat, "templated", True), target_key)

    def cached_salience(self, chat: Any, target: str, ig_steps: int, smooth_grad_samples: int = 0) -> Any:
        """The complete result if it is in memory, else None; never runs the model."""
        explained = target or self.cached_generation(chat)
        if explained is None:
            return None
        methods, config = self._methods_and_config(ig_steps, smooth_grad_samples)
        return self._results.get(self._pair_key(chat, target, explained) + (methods, config))

    def cached_span(self, chat: Any, target: str, method: str, t0: int = 0, t1: int | None = None) -> Any:
        """<float32>[N] salience of span (t0, t1) for `method` from any cached result of this prompt and
        target (complete or partial, whatever the extra methods' counts), else None; never runs the model."""
        explained = target or self.cached_generation(chat)
        if explained is None:
            return None
        pair = self._pair_key(chat, target, explained)
        for cache in (self._results, self._partials):
            for key, result in reversed(cache.items()):
                if key[:len(pair)] == pair and result.has_span(method, t0, t1):
                    return result.span_salience(method, t0, t1)
        return None

    def salience(self, chat: Any, target: str, ig_steps: int, job: progressive.Job | None = None,
                 smooth_grad_samples: int = 0, cancel: Callable[[], bool] | None = None) -> Any:
        """SalienceResult for prompt + target (the greedy response when target is empty), cached.

        Every matrix is background work for the scheduler: it runs in time slices of
        `slice_s` and lets waiting interactive requests (clicks, traces, the first
        highlight) use the model between slices.

        ig_steps, smooth_grad_samples: counts of the extra methods (0: not computed).
        job: when given (a background job), progress goes to it and it is checked for
          cancellation after every slice.
        cancel: without a job (a blocking request), checked once the model is ours and after
          every slice (`BlockingCancel`); raises ComputationCancelled when it returns True.
        """
        explained = self._explained(chat, target)
        methods, config = self._methods_and_config(ig_steps, smooth_grad_samples)
        key = self._pair_key(chat, target, explained) + (methods, config)
        result = self._results.get(key)
        if result is None:
            with self.lock.background():
                result = self._results.get(key)
                if result is None:
                    log = _log_progress()
                    if job is None:
                        logger.info("Blocking salience request: computing every matrix (%s) in background slices.",
                                    ", ".join(methods))
                    else:
                        cancel = job.should_stop

                    def progress(method: str, done: int, total: int) -> None:
                        if job is not None:
                            job.report(done, total)
                        log(method, done, total)
                        self.lock.yield_to_waiting()  # clicks that arrived during the slice go now

                    result = ss.compute_salience(self.lm, chat, explained, methods=methods, config=config,
                                                 progress=progress, cancel=cancel, slice_s=self.slice_s,
                                                 between_slices=self.lock.yield_to_waiting)
                    self._results.put(key, result)
        return result

    def quick(self, chat: Any, target: str, ig_steps: int, t0: int, t1: int | None,
              cancel: Callable[[], bool] | None = None, smooth_grad_samples: int = 0) -> Any:
        """A result that answers span (t0, t1) exactly: the complete result when cached, else a
        partial one (one forward + backward for the gradient methods; IG, SmoothGrad: one batch
        of steps or samples)."""
        complete = self.cached_salience(chat, target, ig_steps, smooth_grad_samples)
        methods, config = self._methods_and_config(ig_steps, smooth_grad_samples)
        if complete is not None and all(complete.has_span(m, t0, t1) for m in methods):
            return complete
        explained = self._explained(chat, target)
        pkey = self._pair_key(chat, target, explained) + (int(ig_steps), int(smooth_grad_samples))
        with self.lock:
            partial = self._partials.get(pkey)
            # Gradient-method values do not depend on the extra counts: also look in the plain result.
            base = complete if complete is not None else self.cached_salience(chat, target, 0)
            known = [r for r in (base, partial) if r is not None]
            missing = [m for m in methods
                       if not any(r.has_span(m, t0, r.num_targets if t1 is None else t1) for r in known)]
            if missing:
                fresh = ss.compute_span_result(self.lm, chat, explained, methods=missing, t0=t0, t1=t1,
                                               config=config, progress=_log_progress(), cancel=cancel)
                partial = fresh if partial is None else partial.merged(fresh)
                self._partials.put(pkey, partial)
            return partial if base is None else base.merged(partial) if partial is not None else base

    def span_salience(self, chat: Any, target: str, ig_steps: int, t0: int, t1: int,
                      smooth_grad_samples: int = 0) -> dict[str, Any]:
        """{method: <float32>[N]} for log p(target[t0:t1]).

        From the cached result (milliseconds); grad_norm falls back to one
        backward pass when the result was too large to keep its Gram tensor.
        """
        result = self.salience(chat, target, ig_steps, smooth_grad_samples=smooth_grad_samples)
        out = {}
        for method in result.matrices:
            if method == fields.GRAD_NORM_METHOD and getattr(result, "grad_gram", None) is None:
                _, config = self._methods_and_config(ig_steps, smooth_grad_samples)
                with self.lock:
                    out[method] = ss.compute_span_salience(
                        self.lm, chat, self._explained(chat, target), method, t0, t1, config=config)
            else:
                out[method] = result.span_salience(method, t0, t1)
        return out

    def tokens(self, chat: Any, target: str) -> list[str]:
        """Display strings of the prompt (+ target) tokens, as the salience model shows them.

        Never waits for the model: the tokenizer copy under `tokenizer_lock`.
        """
        lm = self._tokenizer_lm
        with self.tokenizer_lock:
            prompt = lm.encode_prompt(chat)
            pieces = [(prompt.text, prompt.offsets, prompt.ids)]
            if target:
                tok = lm.tokenize(target, add_special_tokens=False)
                pieces.append((tok.text, tok.offsets, tok.ids))
            out = []
            for text, offsets, ids in pieces:
                for (s, e), i in zip(offsets, ids):
                    out.append(text[s:e] if e > s else lm.tokenizer.convert_ids_to_tokens(int(i)))
            return out


class _Wrapper(lit_model.Model):
    """Common plumbing: one example at a time, errors turned into RequestError."""

    # LIT's per-id prediction cache is bypassed for these (lit_app/server.py):
    # they cache by content themselves.
    caches_itself = True

    def __init__(self, shared: SharedLM):
        self._shared = shared

    @classmethod
    def from_loaded(cls, existing: "_Wrapper") -> "_Wrapper":
        """Another wrapper over the same loaded model."""
        return cls(existing._shared)

    @classmethod
    def init_spec(cls) -> lit_types.Spec | None:
        return None  # not loadable from the UI; the server loads the model

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


def _guarded(who: str, fn: Callable[[JsonDict], JsonDict], ex: JsonDict) -> JsonDict:
    try:
        return fn(ex)
    except RequestError as e:
        logger.warning("%s: rejected request: %s", who, e)
        raise
    except (ss.SalienceError, ValueError, TypeError, KeyError) as e:
        message = _one_line(str(e) if not isinstance(e, KeyError) else f"missing key {e}")
        logger.warning("%s: rejected request: %s", who, message)
        raise RequestError(message) from e
    except Exception as e:  # pylint: disable=broad-except
        logger.exception("%s: internal error", who)
        raise RequestError(
            _one_line(f"Internal error ({type(e).__name__}: {e}); the server log has the traceback.")
        ) from e


class GenerationModel(_Wrapper):
    """Prompt (+ optional system prompt) -> the model's greedy response.

    No generation storm: LIT's data table asks for the response of every row when
    the page opens (one request with all rows). A request for more than one input
    answers from the caches only (memory, then disk) and leaves the other rows'
    responses empty; a single-input request (the selected datapoint) generates.
    """

    def input_spec(self) -> lit_types.Spec:
        return fields.GENERATION_INPUT_SPEC

    def output_spec(self) -> lit_types.Spec:
        return fields.GENERATION_OUTPUT_SPEC

    def predict(self, inputs: Iterable[JsonDict], **kw) -> list[JsonDict]:
        inputs = list(inputs)
        if len(inputs) <= 1:
            return super().predict(inputs, **kw)
        outputs = []
        for ex in inputs:
            try:
                gen = self._shared.cached_generation(self._shared.format_prompt(ex))
            except (RequestError, ss.SalienceError, ValueError, TypeError):
                gen = None  # a bad row: its own request will say why
            outputs.append(self._output(gen))
        return outputs

    @staticmethod
    def _output(gen: Any) -> JsonDict:
        if gen is None:
            return {fields.RESPONSE: "", fields.RESPONSE_TOKENS: []}
        return {
            fields.RESPONSE: gen.text,
            fields.RESPONSE_TOKENS: [gen.text[s:e] for s, e in gen.offsets],
        }

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        return self._output(self._shared.generate(self._shared.format_prompt(ex)))


class SalienceModel(_Wrapper):
    """Prompt + target (or the greedy response) -> salience of every prompt token for every target token."""

    def input_spec(self) -> lit_types.Spec:
        return fields.SALIENCE_INPUT_SPEC

    def output_spec(self) -> lit_types.Spec:
        return fields.SALIENCE_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        detail = _detail_field(ex)
        if detail == "":
            return self._predict_complete(ex)
        if detail == "stream":
            return self._predict_stream(ex)
        return self._predict_progressive(ex, detail)

    def _predict_stream(self, ex: JsonDict) -> JsonDict:
        """The greedy response generated so far (`detail="stream"`); never waits for the model."""
        if _text_field(ex, fields.TARGET):
            raise RequestError(f'"{fields.DETAIL}": "stream" follows the generation of the response, but this input'
                               f' has a "{fields.TARGET}", so nothing is generated. Fix: leave "{fields.TARGET}" empty.')
        shared = self._shared
        stream = shared.generation_stream(shared.format_prompt(ex))
        out = _status_only({})
        out[fields.RESPONSE] = stream.text
        out[fields.SALIENCE] = {"stream": stream.as_dict(shared.generation_config.max_new_tokens)}
        return out

    def _predict_complete(self, ex: JsonDict) -> JsonDict:
        """Every matrix at once (blocking): LIT's own modules and scripts; stops early (BlockingCancel)."""
        cancel = self._shared.blocking_cancel(ex)
        chat = self._shared.format_prompt(ex)
        target = _text_field(ex, fields.TARGET)
        counts = extra_counts(ex)
        try:
            result = self._shared.salience(chat, target, cancel=cancel, **counts)
        except ss.ComputationCancelled:
            error = ClientGone if cancel.reason == BlockingCancel.CLIENT_GONE else RequestError
            raise error(f"Cancelled: {cancel.reason or 'stopped'} before every salience matrix was"
                        " computed. Fix: send the request again (one that nobody waits for is stopped).") from None
        n_prompt = int(result.n_prompt_tokens)
        n_targets = len(result.tokens) - n_prompt
        span = parse_target_span(ex.get(fields.TARGET_SPAN), n_targets)
        span_salience = {}
        if span is not None:
            values = self._shared.span_salience(chat, target, t0=span[0], t1=span[1], **counts)
            span_salience = {m: compact(v) for m, v in values.items()}
        return self._outputs(result, counts, span_salience, None)

    def _outputs(self, result: Any, counts: Mapping[str, int], span_salience: JsonDict,
                 detail: JsonDict | None) -> JsonDict:
        """The output fields; `counts` = {count field: count} of the extra methods (extra_counts)."""
        tokens = list(result.tokens)
        n_prompt = int(result.n_prompt_tokens)

        def _seq_map(method: str) -> lit_dtypes.SequenceSalienceMap | None:
            if method not in result.matrices:
                return None
            return lit_dtypes.SequenceSalienceMap(
                tokens_in=tokens[:n_prompt],
                tokens_out=tokens[n_prompt:],
                salience=np.asarray(result.matrices[method], dtype=np.float32),  # [T, N]
            )

        methods, _ = self._shared._methods_and_config(**counts)
        return {
            fields.RESPONSE: result.text[result.prompt_end:],
            fields.TOKENS: tokens,
            fields.SALIENCE: salience_payload(result, methods=methods, detail=detail, dtype=self._shared.dtype,
                                              **counts),
            fields.SPAN_SALIENCE: span_salience,
            fields.GRAD_L2: _seq_map(fields.GRAD_NORM_METHOD),
            fields.GRAD_DOT_INPUT: _seq_map(fields.GRAD_X_INPUT_METHOD),
        }

    @staticmethod
    def _group(ex: JsonDict) -> tuple:
        """Which datapoint a request is about, without the model (polls must not wait for it)."""
        return (_text_field(ex, fields.PROMPT), _text_field(ex, fields.SYSTEM), repr(_chat_field(ex)),
                _text_field(ex, fields.TARGET))

    def _predict_progressive(self, ex: JsonDict, detail: str) -> JsonDict:
        """First highlight now, matrices in the background (docs/architecture.md, "Progressive salience").

        Background jobs: "grad" (the gradient matrices, started by a "span" request) and, per
        extra method, f"{kind}{count}" (e.g. "ig16", "sg8": the gradient matrices plus that
        method's, started by its `matrix_detail` request). A "poll" follows the job of the one
        extra method whose count is > 0, else the "grad" job.
        """
        shared = self._shared
        group = self._group(ex)
        counts = extra_counts(ex)
        off = {field: 0 for field in counts}
        extra = _job_extra(counts, detail) if detail != "span" else None
        job_counts = off if extra is None else {**off, extra.field: counts[extra.field]}
        kind = "grad" if extra is None else f"{extra.kind}{counts[extra.field]}"
        if detail == "poll":
            job = shared.jobs.get(group, kind)
            if job is None:
                return _status_only({"kind": kind, "state": "none", "done": 0, "total": 0, "elapsed_s": 0,
                                     "eta_s": None, "error": "Nothing is being computed for this prompt;"
                                     " select it again to start."})
            if job.state != progressive.DONE:
                return _status_only(job.status())
            if job.payload is None:
                job.payload = self._outputs(job.result, job_counts, {}, job.status())
            return job.payload

        shared.jobs.focus(group)
        # Latest wins: a clicked span is stale once another datapoint is selected or
        # another span of this one is clicked (IG and SmoothGrad spans stop within one
        # chunk of steps or samples). The ticket is taken on arrival, before anything
        # waits for the model.
        requested = parse_target_span(ex.get(fields.TARGET_SPAN), 1 << 30) if detail == "span" else None
        ticket = shared.next_span_ticket(group) if requested is not None else None
        chat = shared.format_prompt(ex)
        target = _text_field(ex, fields.TARGET)

        def run_with(job_counts: Mapping[str, int]) -> Callable[[progressive.Job], Any]:
            return lambda job: shared.salience(chat, target, job=job, **job_counts)

        if extra is not None:  # "<method>_matrix": that method's per-token matrix, in the background
            job = shared.jobs.submit(group, kind, run_with(job_counts), replaces=extra.kind)
            return _status_only(job.status())

        # detail == "span": the exact salience of one span (default: the whole response) now.
        # The span's range is checked by the core library once the target is tokenized.
        t0, t1 = requested if requested is not None else (0, None)

        def stale() -> bool:
            return shared.jobs.focus_group != group or (
                ticket is not None and shared.span_ticket(group) != ticket)

        try:
            result = shared.quick(chat, target, t0=t0, t1=t1, cancel=stale, **counts)
        except ss.ComputationCancelled:
            raise RequestError("Cancelled: a newer selection replaced this request.") from None
        complete = shared.cached_salience(chat, target, 0)
        if complete is not None:
            status = {"kind": "grad", "state": progressive.DONE, "done": 1, "total": 1, "elapsed_s": 0,
                      "eta_s": None, "error": ""}
        else:
            status = shared.jobs.submit(group, "grad", run_with(off)).status()
        span = (t0, result.num_targets if t1 is None else t1)
        methods, _ = shared._methods_and_config(**counts)
        values = {m: compact(result.span_salience(m, *span)) for m in methods if result.has_span(m, *span)}
        if requested is not None:
            # A clicked span: the client has the text and tokens already; send only the values.
            errors = {_span_key(*k): float(v) for k, v in result.span_ig_errors.items() if k == span}
            return {**_status_only(status), fields.SALIENCE: {"detail": status, "span_ig_errors": errors},
                    fields.SPAN_SALIENCE: values}
        if complete is not None:
            result = complete.merged(result)
        return self._outputs(result, counts, values, status)


def _status_only(status: JsonDict) -> JsonDict:
    """A poll answer while the matrices are not ready: only the progress."""
    return {
        fields.RESPONSE: "",
        fields.TOKENS: [],
        fields.SALIENCE: {"detail": dict(status)},
        fields.SPAN_SALIENCE: {},
        fields.GRAD_L2: None,
        fields.GRAD_DOT_INPUT: None,
    }


class TokenizerModel(_Wrapper):
    """Prompt (+ target) -> the tokens the salience model explains."""

    def input_spec(self) -> lit_types.Spec:
        return fields.TOKENIZER_INPUT_SPEC

    def output_spec(self) -> lit_types.Spec:
        return fields.TOKENIZER_OUTPUT_SPEC

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        chat = self._shared.format_prompt(ex)
        return {fields.TOKENS: self._shared.tokens(chat, _text_field(ex, fields.TARGET))}


def make_models(shared: SharedLM, name: str) -> dict[str, lit_model.Model]:
    """The LIT model map for one loaded model; the generation model first (LIT's default)."""
    gen_name, salience_name, tokenizer_name = fields.model_group_names(name)
    generation = GenerationModel(shared)
    return {
        gen_name: generation,
        salience_name: SalienceModel.from_loaded(generation),
        tokenizer_name: TokenizerModel.from_loaded(generation),
    }
