"""Greedy responses of one loaded model: generated once, kept in memory and on disk, readable while they run.

`Responses.generate` runs the model under the model lock and keeps the result (an LRU in memory,
lit_app/model/generation_cache.py on disk, so a restarted server shows it at once); while a response
waits for the model and while it is generated, its text so far is in a `StreamTable`, which
`Responses.stream` reads without the model lock (the `detail="stream"` answer, `GenerationStream`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import sequence_salience as ss
from sequence_salience.model import decode_text
from sequence_salience.field_rules import MAX_NEW_TOKENS
from lit_app.model import generation_cache
from lit_app.errors import RequestError
from lit_app.schema.inputs import JsonDict
from lit_app.model.lru_cache import LRUCache
from lit_app.model.scheduler import ModelScheduler

logger = logging.getLogger(__name__)

# What a generation is kept by: (prompt text, chat-template flag, generation settings).
GenerationKey = tuple[str, bool, ss.GenerationConfig]


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


class StreamTable:
    """The responses waiting for the model or being generated, by key, and a condition every change notifies.

    A change (a token, a state, a finished generation) bumps a version number; a reader that saw
    version v waits (`wait_for_change`) only while the version is still v, so no change is missed
    between looking and waiting.
    """

    def __init__(self) -> None:
        self._streams: dict[GenerationKey, GenerationStream] = {}
        self._changed = threading.Condition(threading.Lock())
        self._version = 0

    def set(self, key: GenerationKey, stream: GenerationStream) -> None:
        """Publishes the state of `key`'s response."""
        self._change(key, stream)

    def drop(self, key: GenerationKey) -> None:
        """Forgets `key` (its cached generation answers from now on)."""
        self._change(key, None)

    def _change(self, key: GenerationKey, stream: GenerationStream | None) -> None:
        with self._changed:
            if stream is None:
                self._streams.pop(key, None)
            else:
                self._streams[key] = stream
            self._version += 1
            self._changed.notify_all()

    def look(self, key: GenerationKey) -> tuple[GenerationStream | None, int]:
        """(`key`'s published state or None, the version it was read at)."""
        with self._changed:
            return self._streams.get(key), self._version

    def wait_for_change(self, version: int, timeout_s: float) -> None:
        """Waits up to `timeout_s` for a change after `version` (at once when there was one)."""
        with self._changed:
            if self._version == version:
                self._changed.wait(timeout_s)


class Responses:
    """Greedy generation of one loaded model, cached and streamed (module docstring)."""

    def __init__(self, lm: ss.LanguageModel, model_lock: ModelScheduler, max_new_tokens: int, cache_size: int,
                 disk_cache: bool | str = True):
        """Args:
          lm: the loaded model; model_lock: what every generation runs under.
          max_new_tokens: the server's --max_new_tokens, the longest response it generates: a row's own
            budget (`RowPrompt.max_new_tokens`) is capped by it, and a row without one gets
            min(`field_rules.MAX_NEW_TOKENS.default`, this).
          cache_size: how many generations to keep in memory.
          disk_cache: keep generations on disk (True: under the library's cache dir; a path: there;
            False: memory only).
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}; it must be at least 1.")
        self._lm = lm
        self._lock = model_lock
        self.config = ss.GenerationConfig(max_new_tokens=max_new_tokens)  # the cap
        self.default_budget = min(int(MAX_NEW_TOKENS.default), max_new_tokens)
        self.streams = StreamTable()
        self._memory: LRUCache[ss.Generation] = LRUCache(cache_size)
        self._store = None
        if disk_cache:
            self._store = generation_cache.GenerationStore(lm, None if disk_cache is True else disk_cache)

    def config_for(self, chat: ss.ChatPrompt) -> ss.GenerationConfig:
        """The GenerationConfig of `chat`'s response, the one source of its budget: the row's own
        `max_new_tokens` (`RowPrompt`, e.g. the shipped chain-of-thought row's) or, without one, the
        default budget; either capped by the server's --max_new_tokens. Part of the cache key, so a
        response generated under one budget never answers for another."""
        own = getattr(chat, "max_new_tokens", None)
        budget = min(self.default_budget if own is None else own, self.config.max_new_tokens)
        if budget == self.config.max_new_tokens:
            return self.config
        return dataclasses.replace(self.config, max_new_tokens=budget)

    def _key(self, chat: ss.ChatPrompt) -> GenerationKey:
        return (chat.text, getattr(chat, "templated", True), self.config_for(chat))

    def cached(self, chat: ss.ChatPrompt) -> ss.Generation | None:
        """The generation if it was computed before (memory, then disk), else None; never runs the model."""
        key = self._key(chat)
        gen = self._memory.get(key)
        if gen is None and self._store is not None:
            gen = self._store.get(*key)
            if gen is not None:
                self._memory.put(key, gen)
        return gen

    def generate(self, chat: ss.ChatPrompt) -> ss.Generation:
        """Greedy generation for a formatted prompt, of at most its budget (`config_for`), cached by its
        text and budget (in memory and on disk).

        While it waits for the model and while it runs, the text generated so far is readable
        without the model lock (`stream`).
        """
        gen = self.cached(chat)
        if gen is not None:
            return gen
        key = self._key(chat)
        self.streams.set(key, GenerationStream("queued"))
        try:
            with self._lock:
                gen = self.cached(chat)
                if gen is None:
                    self.streams.set(key, GenerationStream("running"))
                    start = time.perf_counter()
                    gen = self._lm.generate(chat, key[2], on_token=lambda ids: self._publish(key, ids))
                    logger.info("Generated %d tokens in %.2f s.", len(gen.ids), time.perf_counter() - start)
                    self._memory.put(key, gen)
                    if self._store is not None:
                        self._store.put(*key, gen)
        finally:
            self.streams.drop(key)  # the cached generation answers from now on
        return gen

    def _publish(self, key: GenerationKey, ids: tuple[int, ...]) -> None:
        """Publishes the response so far. On the generating thread (it holds the model lock, so the
        model's tokenizer is free); a character whose bytes are not all generated yet (U+FFFD at the
        end) is left out until it is complete, so the text only ever grows."""
        text = decode_text(self._lm.tokenizer, ids).rstrip("\ufffd")
        self.streams.set(key, GenerationStream("running", text, len(ids)))

    def stream(self, chat: ss.ChatPrompt, after: int | None = None, wait_s: float = 0.0) -> GenerationStream:
        """The greedy response of `chat` so far (the `detail="stream"` answer); never waits for the model.

        state "done": the whole generation (cached); "running": the text of the tokens generated so
        far; "queued": a request for it waits for the model; "none": nobody asked for it.

        after: the number of response tokens the caller already shows. Then the answer waits, up to
          `wait_s` seconds, until there are more tokens or the generation is done (a long poll: the
          page gets the first token the moment it exists, with one request instead of a poll every
          few hundred milliseconds); after the wait it answers what there is. None: answer at once.
        """
        key = self._key(chat)
        deadline = time.monotonic() + wait_s
        while True:
            stream, version = self.streams.look(key)
            if stream is None:
                gen = self.cached(chat)
                if gen is not None:
                    return GenerationStream("done", gen.text, len(gen.ids), gen.stopped_by)
                stream = GenerationStream("none")
            left = deadline - time.monotonic()
            if after is None or stream.tokens > after or left <= 0:
                return stream
            self.streams.wait_for_change(version, left)

    def explained(self, chat: ss.ChatPrompt, target: str) -> str | ss.Generation:
        """The target to explain: the typed text, or the greedy Generation (its ids used as they are).

        Raises:
          RequestError: the model generated an empty response.
        """
        if target:
            return target
        gen = self.generate(chat)
        if not gen.ids:
            raise RequestError(
                "The model generated an empty response, so there is nothing to explain."
                " Fix: type a target text to explain, or change the prompt."
            )
        return gen
