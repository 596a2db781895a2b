"""Salience results of one loaded model kept in memory by prompt + target; reading them never runs the model.

Every entry is keyed by its pair (`pair_key`: the prompt text, its chat-template flag, and the
target: the typed text, or the ids of the greedy response) plus what else changes the values:

* `complete`: results with every matrix of the methods asked for, by pair + (methods, SalienceConfig);
* `partial`: results exact for the spans computed so far (first highlights, clicked spans), by
  pair + the extra methods' counts;
* `segments`: a segment method's values (SegmentSalience), by pair + `inputs.SegmentRequest`.

The results' caches are bounded by entry count and by bytes (lit_app/model/lru_cache.py). A pair whose
target is the greedy response is only known once that response is (`Responses.cached`): before,
every lookup answers None.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

import numpy as np

import sequence_salience as ss
from sequence_salience.ablation import SegmentSalience
from lit_app.schema.inputs import SegmentRequest
from lit_app.model.lru_cache import LRUCache
from lit_app.model.responses import Responses

# Segment salience results kept (each holds a few arrays of the prompt's size).
SEGMENT_CACHE_SIZE = 64

# (prompt text, chat-template flag, ("typed", text) or ("generated", response ids)).
Pair = tuple[str, bool, tuple[str, str | tuple[int, ...]]]


def pair_key(chat: ss.ChatPrompt, target: str, explained: str | ss.Generation) -> Pair:
    """The pair's part of every key: `explained` is `target` when typed, else the greedy Generation."""
    target_key = ("typed", target) if target else ("generated", explained.ids)
    return (chat.text, getattr(chat, "templated", True), target_key)


class SalienceStore:
    """The three caches of salience values (module docstring) and the lookups that never run the model."""

    def __init__(self, responses: Responses, cache_size: int, cache_bytes: int,
                 segment_cache_size: int = SEGMENT_CACHE_SIZE):
        """responses: where a pair's greedy response is looked up; cache_size, cache_bytes: the bounds of
        each results cache (entries, bytes)."""
        self._responses = responses
        self.complete: LRUCache[ss.SalienceResult] = LRUCache(cache_size, cache_bytes)
        self.partial: LRUCache[ss.SalienceResult] = LRUCache(cache_size, cache_bytes)
        self.segments: LRUCache[SegmentSalience] = LRUCache(segment_cache_size)

    def pair(self, chat: ss.ChatPrompt, target: str) -> Pair | None:
        """The pair's key, or None when the target is the greedy response and that is not cached yet."""
        explained = target or self._responses.cached(chat)
        return None if explained is None else pair_key(chat, target, explained)

    def _get(self, cache: LRUCache, chat: ss.ChatPrompt, target: str, rest: tuple[Hashable, ...]):
        pair = self.pair(chat, target)
        return None if pair is None else cache.get(pair + rest)

    def complete_of(self, chat: ss.ChatPrompt, target: str, methods: tuple[str, ...],
                    config: ss.SalienceConfig) -> ss.SalienceResult | None:
        """The complete result of these methods and config, else None."""
        return self._get(self.complete, chat, target, (methods, config))

    def segments_of(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest) -> SegmentSalience | None:
        """The SegmentSalience of `request`, else None."""
        return self._get(self.segments, chat, target, (request,))

    def results_of(self, chat: ss.ChatPrompt, target: str) -> Iterator[ss.SalienceResult]:
        """Every cached result (complete first, then partial; newest first) of this prompt and target,
        whatever the methods and counts."""
        pair = self.pair(chat, target)
        if pair is None:
            return
        for cache in (self.complete, self.partial):
            for key, result in reversed(cache.items()):
                if key[:len(pair)] == pair:
                    yield result

    def span(self, chat: ss.ChatPrompt, target: str, method: str, t0: int = 0,
             t1: int | None = None) -> np.ndarray | None:
        """<float32>[N] salience of span (t0, t1) for `method` from any cached result of this prompt and
        target (complete or partial, whatever the extra methods' counts), else None."""
        for result in self.results_of(chat, target):
            if result.has_span(method, t0, t1):
                return result.span_salience(method, t0, t1)
        return None

    def logprobs(self, chat: ss.ChatPrompt, target: str) -> np.ndarray | None:
        """<float32>[T] log p of each target token from any cached result of this prompt and target
        (complete or partial: every result's forward records them), else None."""
        for result in self.results_of(chat, target):
            return result.target_logprobs
        return None

    def clear(self) -> None:
        """Drops every entry, complete, partial and per segment (generations stay cached)."""
        self.complete.clear()
        self.partial.clear()
        self.segments.clear()
