"""One loaded model shared by every LIT wrapper: its lock, tokenizer copy, caches and background jobs.

`SharedLM` holds one `sequence_salience` LanguageModel and serves the wrappers
(lit_app/generation.py, salience.py, tokenizer.py, inside.py, explain.py): greedy
generation (cached in memory and on disk, streamed while it runs), salience results
(complete, in background slices; partial, for a first highlight or a clicked span),
tokens. `GenerationStream` is the `detail="stream"` answer.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Callable

import numpy as np

import sequence_salience as ss
from sequence_salience.ablation import AblationConfig, segment_salience
from sequence_salience.compare import CrossLogprobs, response_logprobs
from sequence_salience.methods import DEFAULT_METHODS, get_segment_method
from sequence_salience.slices import DEFAULT_SLICE_S, SliceSizer
from lit_app import cancel, fields, generation_cache, memory, progressive
from lit_app.errors import RequestError
from lit_app.inputs import JsonDict, chat_field, text_field
from lit_app.lru_cache import LRUCache
from lit_app.method_registry import COUNT_FIELDS, EXTRA_METHODS
from lit_app.scheduler import ModelScheduler

logger = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 64
CACHE_SIZE = 32
# Segment salience results kept (each holds a few arrays of the prompt's size).
SEGMENT_CACHE_SIZE = 64
# Salience results are cached up to this many bytes (a 4,000-token result with
# its Gram tensor is hundreds of MB).
DEFAULT_CACHE_BYTES = 2 * 1024**3
# {count field: count} of the extra methods (lit_app/method_registry.py); None or absent = 0 (off).
Counts = Mapping[str, int] | None


def _log_progress(every_s: float = 2.0) -> Callable[[str, int, int], None]:
    """A compute_salience progress callback that logs at most every `every_s` seconds (and at the end)."""
    last = [time.monotonic()]

    def report(method: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= every_s:
            last[0] = now
            logger.info("salience %s: %d/%d", method, done, total)

    return report


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
        cache_size: int = CACHE_SIZE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        disk_cache: bool | str = True,
        heartbeat_s: float = progressive.DEFAULT_HEARTBEAT_S,
        slice_s: float = DEFAULT_SLICE_S,
    ):
        """Args:
          lm: a loaded `sequence_salience.LanguageModel`.
          max_new_tokens: longest greedy response.
          salience_config: base `SalienceConfig` (the extra methods' counts come from each
            request; their other settings, e.g. SmoothGrad's noise and seed, from here).
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
            raise ValueError(f"slice_s={slice_s}; it must be a positive number of seconds (e.g. 0.25).")
        self.slice_s = float(slice_s)
        self.lock = ModelScheduler()
        # Each time the model is let go, the pass's freed memory goes back to the OS (at most every 2 s):
        # glibc kept it, and RSS grew with every larger pass (issue 33).
        self.lock.on_free = memory.trim_soon
        self._tokenizer_lm, self.tokenizer_lock = _tokenizer_twin(lm, self.lock)
        self.jobs = progressive.DetailJobs(heartbeat_s=heartbeat_s)
        self._generations = LRUCache(cache_size)
        self._results = LRUCache(cache_size, cache_bytes)
        self._partials = LRUCache(cache_size, cache_bytes)
        # `detail="span"` requests (first highlights and clicked spans), per datapoint group: the
        # newest supersedes the older ones (lit_app/cancel.py).
        self.span_requests = cancel.Latest()
        # Segment methods' values (SegmentSalience), by pair + SegmentRequest (every setting that changes them).
        self._segments = LRUCache(SEGMENT_CACHE_SIZE)
        # Generations waiting for the model or running, by generation key (generation_stream).
        self._streams: dict[Hashable, GenerationStream] = {}
        self._streams_lock = threading.Lock()
        # Notified on every change of _streams (a token, a state, a finished generation), counted by
        # _streams_version: what a waiting `generation_stream(..., after=...)` wakes up on.
        self._streams_changed = threading.Condition(self._streams_lock)
        self._streams_version = 0
        self._store = None
        if disk_cache:
            self._store = generation_cache.GenerationStore(lm, None if disk_cache is True else disk_cache)

    @property
    def name(self) -> str:
        return str(getattr(self.lm, "name", "model"))

    @property
    def dtype(self) -> str:
        return str(getattr(self.lm, "dtype", "")).replace("torch.", "")

    def format_prompt(self, ex: JsonDict) -> Any:
        """The model input (a `ChatPrompt`) for an input example."""
        prompt = text_field(ex, fields.PROMPT, required=True)
        if not prompt.strip():
            raise RequestError("The prompt is empty. Fix: type a prompt in the editor, then add it.")
        system = text_field(ex, fields.SYSTEM) or None
        with self.tokenizer_lock:
            return self._tokenizer_lm.format_prompt(prompt, system=system, chat=chat_field(ex))

    def generation_config_for(self, max_new_tokens: int | None = None) -> Any:
        """The server's GenerationConfig, or one with a shorter `max_new_tokens` (a request's own limit).

        Raises:
          RequestError: `max_new_tokens` is not a whole number from 1 to the server's limit.
        """
        most = self.generation_config.max_new_tokens
        if max_new_tokens is None or max_new_tokens == most:
            return self.generation_config
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= most:
            raise RequestError(f'Input field "{fields.MAX_NEW_TOKENS}" is {max_new_tokens!r}; use a whole number from 1'
                               f" to {most} (the server's --max_new_tokens).")
        return dataclasses.replace(self.generation_config, max_new_tokens=max_new_tokens)

    def _generation_key(self, chat: Any, max_new_tokens: int | None = None) -> tuple:
        return (chat.text, getattr(chat, "templated", True), self.generation_config_for(max_new_tokens))

    def cached_generation(self, chat: Any, max_new_tokens: int | None = None) -> Any:
        """The generation if it was computed before (memory, then disk), else None; never runs the model.

        max_new_tokens: a request's own limit (at most the server's); None: the server's."""
        key = self._generation_key(chat, max_new_tokens)
        gen = self._generations.get(key)
        if gen is None and self._store is not None:
            gen = self._store.get(*key)
            if gen is not None:
                self._generations.put(key, gen)
        return gen

    def generate(self, chat: Any, max_new_tokens: int | None = None) -> Any:
        """Greedy generation for a formatted prompt, cached by its text (in memory and on disk).

        While it waits for the model and while it runs, the text generated so far is readable
        without the model lock (`generation_stream`; for the server's own `max_new_tokens`).

        max_new_tokens: a request's own limit, from 1 to the server's (`generation_config_for`);
          None: the server's.
        """
        gen = self.cached_generation(chat, max_new_tokens)
        if gen is None:
            key = self._generation_key(chat, max_new_tokens)
            config = key[2]
            self._set_stream(key, GenerationStream("queued"))
            try:
                with self.lock:
                    gen = self.cached_generation(chat, max_new_tokens)
                    if gen is None:
                        self._set_stream(key, GenerationStream("running"))
                        start = time.perf_counter()
                        gen = self.lm.generate(chat, config, on_token=lambda ids: self._stream_token(key, ids))
                        logger.info("Generated %d tokens in %.2f s.", len(gen.ids), time.perf_counter() - start)
                        self._generations.put(key, gen)
                        if self._store is not None:
                            self._store.put(*key, gen)
            finally:
                with self._streams_changed:
                    self._streams.pop(key, None)  # the cached generation answers from now on
                    self._streams_version += 1
                    self._streams_changed.notify_all()
        return gen

    def _stream_token(self, key: Hashable, ids: tuple[int, ...]) -> None:
        """Publishes the response so far. On the generating thread (it holds the model lock, so the
        model's tokenizer is free); a character whose bytes are not all generated yet (U+FFFD at the
        end) is left out until it is complete, so the text only ever grows."""
        text = ss.model.decode_text(self.lm.tokenizer, ids).rstrip("\ufffd")
        self._set_stream(key, GenerationStream("running", text, len(ids)))

    def _set_stream(self, key: Hashable, stream: "GenerationStream") -> None:
        with self._streams_changed:
            self._streams[key] = stream
            self._streams_version += 1
            self._streams_changed.notify_all()

    def generation_stream(self, chat: Any, after: int | None = None, wait_s: float = 0.0) -> "GenerationStream":
        """The greedy response of `chat` so far (the `detail="stream"` answer); never waits for the model.

        state "done": the whole generation (cached); "running": the text of the tokens generated so
        far; "queued": a request for it waits for the model; "none": nobody asked for it.

        after: the number of response tokens the caller already shows. Then the answer waits, up to
          `wait_s` seconds, until there are more tokens or the generation is done (a long poll: the
          page gets the first token the moment it exists, with one request instead of a poll every
          few hundred milliseconds); after the wait it answers what there is. None: answer at once.
        """
        key = self._generation_key(chat)
        deadline = time.monotonic() + wait_s
        while True:
            with self._streams_lock:
                stream, version = self._streams.get(key), self._streams_version
            if stream is None:
                gen = self.cached_generation(chat)
                if gen is not None:
                    return GenerationStream("done", gen.text, len(gen.ids), gen.stopped_by)
                stream = GenerationStream("none")
            left = deadline - time.monotonic()
            if after is None or stream.tokens > after or left <= 0:
                return stream
            with self._streams_changed:
                if self._streams_version == version:  # nothing changed since we looked: wait for a change
                    self._streams_changed.wait(left)

    def explained(self, chat: Any, target: str) -> Any:
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

    def methods_and_config(self, counts: Counts = None) -> tuple[tuple[str, ...], Any]:
        """The default methods plus each extra method whose count is > 0; the config with those counts.

        counts: {count field: count} of the extra methods (`inputs.extra_counts`); absent = 0 (off).
        The config is part of every cache key, so results with other counts are kept apart; the
        other settings of a counted method (e.g. SmoothGrad's noise and seed) come from the server's
        `salience_config`.
        """
        counts = counts or {}
        methods = list(DEFAULT_METHODS)
        config = self.salience_config
        for extra in EXTRA_METHODS:
            if counts.get(extra.field, 0) > 0:
                methods.append(extra.method)
                config = dataclasses.replace(config, **{extra.field: int(counts[extra.field])})
        available = set(ss.list_methods())
        return tuple(m for m in methods if m in available), config

    def _pair_key(self, chat: Any, target: str, explained: Any) -> tuple:
        target_key = ("typed", target) if target else ("generated", explained.ids)
        return (chat.text, getattr(chat, "templated", True), target_key)

    def cached_salience(self, chat: Any, target: str, counts: Counts = None) -> Any:
        """The complete result if it is in memory, else None; never runs the model."""
        explained = target or self.cached_generation(chat)
        if explained is None:
            return None
        methods, config = self.methods_and_config(counts)
        return self._results.get(self._pair_key(chat, target, explained) + (methods, config))

    def cached_span(self, chat: Any, target: str, method: str, t0: int = 0, t1: int | None = None) -> Any:
        """<float32>[N] salience of span (t0, t1) for `method` from any cached result of this prompt and
        target (complete or partial, whatever the extra methods' counts), else None; never runs the model."""
        for result in self._cached_results(chat, target):
            if result.has_span(method, t0, t1):
                return result.span_salience(method, t0, t1)
        return None

    def cached_logprobs(self, chat: Any, target: str) -> Any:
        """<float32>[T] log p of each target token from any cached result of this prompt and target
        (complete or partial: every result's forward records them), else None; never runs the model."""
        for result in self._cached_results(chat, target):
            return result.target_logprobs
        return None

    def _cached_results(self, chat: Any, target: str) -> Iterator[Any]:
        """Every cached result (complete first, then partial; newest first) of this prompt and target,
        whatever the methods and counts; nothing when the greedy response is not cached yet."""
        explained = target or self.cached_generation(chat)
        if explained is None:
            return
        pair = self._pair_key(chat, target, explained)
        for cache in (self._results, self._partials):
            for key, result in reversed(cache.items()):
                if key[:len(pair)] == pair:
                    yield result

    def cross_logprobs(self, chat_a: Any, target_a: str, chat_b: Any) -> tuple[Any, int]:
        """A's response (typed, or its greedy generation) under prompt A and under prompt B, per token
        (`sequence_salience.compare.CrossLogprobs`), and how many forwards it ran: one for B, plus one
        for A when no cached result of A holds its log-probs (the salience module has shown A before)."""
        explained = self.explained(chat_a, target_a)
        cached = self.cached_logprobs(chat_a, target_a)
        forwards = 1
        with self.lock:
            under_b = response_logprobs(self.lm, chat_b, explained)
            if cached is not None and len(cached) == len(under_b.ids):
                under_a = dataclasses.replace(under_b, logprobs=np.asarray(cached, dtype=np.float64))
            else:
                under_a = response_logprobs(self.lm, chat_a, explained)
                forwards += 1
        return CrossLogprobs(under_a, under_b), forwards

    def forget_salience(self) -> None:
        """Drops every cached salience result, complete, partial and per segment (benchmarks time cold
        requests); generations stay cached."""
        self._results.clear()
        self._partials.clear()
        self._segments.clear()

    def _segment_key(self, chat: Any, target: str, explained: Any, request: Any) -> tuple:
        return self._pair_key(chat, target, explained) + (request,)

    def cached_segments(self, chat: Any, target: str, request: Any) -> Any:
        """The SegmentSalience of `request` (inputs.SegmentRequest) when cached, else None; never runs the model."""
        explained = target or self.cached_generation(chat)
        if explained is None:
            return None
        return self._segments.get(self._segment_key(chat, target, explained, request))

    def segment_salience(self, chat: Any, target: str, request: Any, job: progressive.Job | None = None,
                         cancel: Callable[[], bool] | None = None) -> Any:
        """`sequence_salience.ablation.segment_salience` of `request` (inputs.SegmentRequest), cached.

        Background work for the scheduler, as every matrix: its forward batches are time slices of
        `slice_s` between which waiting clicks use the model. job: progress (rows done / rows) goes to
        it and it is checked for cancellation between batches; cancel: the check without a job.
        """
        explained = self.explained(chat, target)
        key = self._segment_key(chat, target, explained, request)
        out = self._segments.get(key)
        if out is not None:
            return out
        if job is not None:
            cancel = job.should_stop
        # Any cached result of this pair has its tokens and offsets: no tokenization under the model lock.
        known = next(self._cached_results(chat, target), None)
        config = AblationConfig(removal=request.removal)
        if request.count:
            config = dataclasses.replace(config, **{get_segment_method(request.method).count_field: request.count})
        with self.lock.background():
            out = self._segments.get(key)
            if out is None:
                if cancel is not None and cancel():  # superseded or abandoned while it waited for the model
                    raise ss.ComputationCancelled(f"{request.method} cancelled before it started")
                log = _log_progress()

                def progress(stage: str, done: int, total: int) -> None:
                    if job is not None:
                        job.report(done, total)
                    log(stage, done, total)
                    self.lock.yield_to_waiting()  # clicks that arrived during the batch go now

                sizer = SliceSizer(self.slice_s, urgent=self.lock.interactive_waiting)
                out = segment_salience(self.lm, chat, explained, request.method, granularity=request.granularity,
                                       pattern=request.pattern, span=request.span, config=config, result=known,
                                       progress=progress, cancel=cancel, slice_s=sizer)
                self._segments.put(key, out)
        return out

    def salience(self, chat: Any, target: str, counts: Counts = None, job: progressive.Job | None = None,
                 cancel: Callable[[], bool] | None = None) -> Any:
        """SalienceResult for prompt + target (the greedy response when target is empty), cached.

        Every matrix is background work for the scheduler: it runs in time slices of
        `slice_s` and lets waiting interactive requests (clicks, traces, the first
        highlight) use the model between slices.

        counts: {count field: count} of the extra methods (absent or 0: not computed).
        job: when given (a background job), progress goes to it and it is checked for
          cancellation after every slice.
        cancel: without a job (a blocking request), checked once the model is ours and after
          every slice (a `lit_app.cancel.Cancel`); raises ComputationCancelled when it returns True.
        """
        explained = self.explained(chat, target)
        methods, config = self.methods_and_config(counts)
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

                    # A click that arrives inside a backward goes at the next layer boundary,
                    # without waiting for the rest of the slice.
                    sizer = SliceSizer(self.slice_s, urgent=self.lock.interactive_waiting)
                    result = ss.compute_salience(self.lm, chat, explained, methods=methods, config=config,
                                                 progress=progress, cancel=cancel, slice_s=sizer,
                                                 between_slices=self.lock.yield_to_waiting)
                    self._results.put(key, result)
        return result

    def quick(self, chat: Any, target: str, t0: int, t1: int | None, counts: Counts = None,
              cancel: Callable[[], bool] | None = None,
              progress: Callable[[str, int, int], None] | None = None) -> Any:
        """A result that answers span (t0, t1) exactly: the complete result when cached, else a
        partial one (one forward + backward for the gradient methods; IG, SmoothGrad: one batch
        of steps or samples). `progress(method, done, total)` is called as the core library
        reports (IG: steps, SmoothGrad: samples), besides the log."""
        complete = self.cached_salience(chat, target, counts)
        methods, config = self.methods_and_config(counts)
        if complete is not None and all(complete.has_span(m, t0, t1) for m in methods):
            return complete
        explained = self.explained(chat, target)
        pkey = self._pair_key(chat, target, explained) + tuple(int((counts or {}).get(f, 0)) for f in COUNT_FIELDS)
        with self.lock:
            partial = self._partials.get(pkey)
            # Gradient-method values do not depend on the extra counts: also look in the plain result.
            base = complete if complete is not None else self.cached_salience(chat, target)
            known = [r for r in (base, partial) if r is not None]
            missing = [m for m in methods
                       if not any(r.has_span(m, t0, r.num_targets if t1 is None else t1) for r in known)]
            if missing:
                log = _log_progress()

                def report(method: str, done: int, total: int) -> None:
                    log(method, done, total)
                    if progress is not None:
                        progress(method, done, total)

                fresh = ss.compute_span_result(self.lm, chat, explained, methods=missing, t0=t0, t1=t1,
                                               config=config, progress=report, cancel=cancel)
                partial = fresh if partial is None else partial.merged(fresh)
                self._partials.put(pkey, partial)
            return partial if base is None else base.merged(partial) if partial is not None else base

    def span_salience(self, chat: Any, target: str, t0: int, t1: int, counts: Counts = None) -> dict[str, Any]:
        """{method: <float32>[N]} for log p(target[t0:t1]).

        From the cached result (milliseconds); grad_norm falls back to one
        backward pass when the result was too large to keep its Gram tensor.
        """
        result = self.salience(chat, target, counts)
        out = {}
        for method in result.matrices:
            if method == fields.GRAD_NORM_METHOD and getattr(result, "grad_gram", None) is None:
                _, config = self.methods_and_config(counts)
                with self.lock:
                    out[method] = ss.compute_span_salience(
                        self.lm, chat, self.explained(chat, target), method, t0, t1, config=config)
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

