"""Scoring many edited prompts of one (prompt, target) pair, each from its first changed token on.

An ablation removes one or a few segments; every token before the first changed one is the same
as in the unedited prompt, and so are its keys and values in every layer of a causal LM. One
forward over the unedited prompt + target keeps them (the KV cache); an edited row then runs only
from its first changed token on, attending to the cached prefix. That is exact: the same
attention over the same keys and values as one full forward of the edited row (up to the order
of float additions; tests/unit/test_ablation.py checks it against plain forwards).

Rows are sorted by how much prefix they share and batched; a batch starts at the shortest shared
prefix among its rows (right-padded suffixes, positions continuing after the prefix). A batch
holds at most `batch_size` rows and `chunk_token_budget` recomputed tokens (memory), or, with
`slice_s`, as many rows as take about that much model time (sequence_salience/slices.py). Where the family takes
the shared-prefix attention (shared_prefix.py) and the model keeps only the logits asked for, rows that start at
different positions go into one forward packed without padding (`packing`: the next rows while the packed mask has at
most PACK_ELEMENTS elements and, with `slice_s`, at most PACK_FORWARDS unedited prompts' positions). On short prompts
that is most of the cost: a forward costs about 0.09 s whatever its length on the default model (0.45 s at load ~10
on 2 cores), and leave one out's rows each start at their own segment, so the padded batching ran about one forward
per row. Longer rows keep the padded batches above.
`progress` runs and `cancel` is checked after every batch. Each batch runs with the torch intra-op thread
count measured to be cheaper on this machine now (sequence_salience/threads.py: on a loaded machine one
thread per small forward was 6-8x faster than two).

Reuse is off (one full forward per row, through scoring's plain path) for a cache that is
not a plain per-layer key/value cache (sliding-window or recurrent layers, older transformers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from sequence_salience.ablation import shared_prefix
from sequence_salience.threads import PassSizes, ThreadChooser
from sequence_salience.errors import ComputationCancelled
from sequence_salience.methods.gradients import (cache_argument, cache_layers, gather_target_logprobs, layer_shares,
                                                 returned_cache, supports_logits_to_keep)
from sequence_salience.model import LanguageModel
from sequence_salience.slices import SliceSizer, make_sizer

logger = logging.getLogger(__name__)

# A batch may recompute this share more tokens than its rows need (they start at its shortest prefix).
MAX_EXTRA = 0.15
# Most elements (heads x packed positions x (prefix + packed positions)) of a packed batch's attention scores: 16M
# floats, 64 MB (e.g. 9 heads, 1,000 positions over a prefix of 800); rows beyond it go into padded batches.
PACK_ELEMENTS = 16_000_000
# With slices (a server), a packed batch holds at most this many times the unedited prompt's positions: about the
# work of a forward + backward of the prompt, so a click that arrives during it waits about one first highlight. A
# bound in seconds (a slice, 0.25-0.5 s) packed nothing on a busy machine, where a forward's fixed cost alone is
# about that (load ~10 on 2 cores: 27 positions 0.56 s, 116 positions 0.88 s, docs/benchmarks.md "Session 34 (h2)").
PACK_FORWARDS = 3

Progress = Callable[[str, int, int], None]
Cancel = Callable[[], bool]


@dataclasses.dataclass(frozen=True)
class Cost:
    """The known cost of a progress report's units: `done` of `total`, in positions the rows recompute (each from its
    own first changed token to the end of the target), known before they run. Leave one word out's rows grow dearer
    along the job (29 up to 132 positions on the constitutional row; issue 43, docs/benchmarks.md "Session 34"), which a
    count of rows cannot say."""

    done: int
    total: int


def costed(progress: Callable[..., None]) -> Callable[..., None]:
    """Marks a progress callback that also takes the units' cost: the scorer then calls it
    `progress(stage, done, total, cost=Cost(...))`; an unmarked callback is called `progress(stage, done, total)` as
    before (`report`)."""
    progress.takes_cost = True  # type: ignore[attr-defined]
    return progress


def report(progress: Callable[..., None], stage: str, done: int, total: int, cost: Cost | None = None) -> None:
    """Calls `progress` with `cost` when it is `costed` (and a cost is known), else as a plain Progress."""
    if cost is not None and getattr(progress, "takes_cost", False):
        progress(stage, done, total, cost=cost)
    else:
        progress(stage, done, total)


@dataclasses.dataclass
class PrefixStats:
    """Forward work of a PrefixScorer: rows scored, tokens they hold (prompt + target, every row) and
    tokens actually run through the model (the rest came from the cached prefix)."""

    rows: int = 0
    tokens: int = 0
    computed: int = 0
    reuse: bool = True
    shared_batches: int = 0  # batches whose rows attended over the one uncopied prefix (shared_prefix.py)
    packed_batches: int = 0  # of them, batches of rows packed into one sequence (shared_prefix.packed_attention)

    @property
    def saved(self) -> float:
        """Share of the rows' tokens that were not recomputed (0 without reuse)."""
        return 1.0 - self.computed / self.tokens if self.tokens else 0.0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    x = np.asarray(a[:n]) != np.asarray(b[:n])
    return int(np.argmax(x)) if x.any() else n


class PrefixScorer:
    """log p(target[t0:t1] | prompt) for edited prompts of one pair, reusing the unedited prefix.

    Args:
      lm: the model; prompt_ids: the unedited prompt's ids; target_ids: the target's ids;
      span: (t0, t1) target tokens whose log-probs are summed.
      reuse: False: every row runs in full (the exactness reference).
      batch_size, chunk_token_budget: most rows, and rows x recomputed tokens, per forward.
      slice_s: None or seconds (or a SliceSizer): rows per forward sized to that much model time.
      progress(stage, done, total), cancel(): per batch; `stage` names the caller's work. A `costed` progress also
        gets each report's `Cost` (the positions the rows done and all rows recompute).
      shared_attention: False: the rows attend over a DynamicCache copy of the prefix (the former path;
        the reference of tests/unit/test_ablation.py) instead of shared_prefix.py's uncopied prefix.
      threads: the intra-op thread count of each edited batch (sequence_salience/threads.py); None: a
        ThreadChooser of torch's count on the calling thread and 1, measured; ThreadChooser(most=1): always 1; a
        PassSizes: a chooser per size class, kept by the caller across computations (a server's).
      packing: False: no packed batches (rows of different starts in padded batches only; the reference of
        tests/unit/test_shared_prefix.py).
      unedited: None, or (<float32>[T] every target token's log-prob, per layer (keys, values) <[1, Hkv, N, Dh]>) of
        the unedited prompt + target from an earlier forward (the first highlight's gradient pass,
        result.UneditedForward): no unedited forward here (the keys and values must cover all N positions). With
        None for the keys and values: the log-probs are the unedited row's, and the forward that keeps its keys
        and values runs only before the first edited batch (none when no row is left to score: leave one out after
        a first map that verified every segment).
    """

    def __init__(self, lm: LanguageModel, prompt_ids: Sequence[int], target_ids: Sequence[int],
                 span: tuple[int, int], *, reuse: bool = True, batch_size: int = 8, chunk_token_budget: int = 8192,
                 slice_s: "float | SliceSizer | None" = None, progress: Progress | None = None,
                 cancel: Cancel | None = None, stage: str = "ablations", shared_attention: bool = True,
                 threads: ThreadChooser | PassSizes | None = None, packing: bool = True,
                 unedited: tuple[np.ndarray, list] | None = None):
        self.lm, self.span, self.stage = lm, (int(span[0]), int(span[1])), stage
        self.prompt = tuple(int(i) for i in prompt_ids)
        self.target = tuple(int(i) for i in target_ids)
        self.batch_size, self.budget = max(1, batch_size), max(1, chunk_token_budget)
        self.sizer = make_sizer(slice_s)
        self.progress, self.cancel = progress, cancel
        self.threads = threads if threads is not None else ThreadChooser()
        self.stats = PrefixStats(reuse=reuse)
        # The prefix part of attention once per batch against the one cached prefix (no per-row copy), for the
        # families shared_prefix.py supports; else each batch gets a DynamicCache of the prefix.
        self.shared_prefix = shared_attention and shared_prefix.supported(lm.model)
        self.packing = packing and self.shared_prefix and supports_logits_to_keep(type(lm.model))
        self._layers: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._layers_later = False  # the unedited row's log-probs are given; its keys and values not yet run
        n = len(self.prompt) + len(self.target)
        given = reuse and unedited is not None and len(unedited[0]) == len(self.target)
        if given and unedited[1] and int(unedited[1][0][0].shape[2]) == n:
            token_lp, self._layers = unedited[0], list(unedited[1])
        elif given and not unedited[1]:
            token_lp, self._layers_later = unedited[0], True
        else:
            token_lp = self._base_forward(reuse)
        self.token_logprobs = np.asarray(token_lp, dtype=np.float32)  # [T]
        self.original_logprob = float(self.token_logprobs[self.span[0]:self.span[1]].astype(np.float64).sum())
        self._count(1, n, 0)  # the unedited row (what ran of it is counted by _base_forward)

    # -- the unedited row -----------------------------------------------------------------------

    def _base_forward(self, reuse: bool) -> np.ndarray:
        """One forward over prompt + target: <float32>[T] every target token's log-prob; (reuse) keeps its keys and
        values."""
        full = self.prompt + self.target
        with self.threads.batch(len(full)):  # the first measured batch (sequence_salience/threads.py: 1 thread first)
            logp, cache = self._forward([full], start=0, cache=None, keep_cache=reuse)
        if reuse:
            self._layers = cache_layers(cache)  # each [1, H, L, Dh]
            if self._layers is None:
                logger.info("KV-prefix reuse is off for %s: its cache is not a plain key/value cache.",
                            type(self.lm.model).__name__)
                self.stats.reuse = False
        self._count(0, 0, len(full))
        return logp[0]

    # -- edited rows ----------------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """<float64>[M] log p(span | prompt) for each prompt; identical prompts are scored once."""
        keys = list({tuple(int(i) for i in p): None for p in prompts})
        todo = [k for k in keys if k != self.prompt]
        if todo and self._layers_later:  # the unedited row's keys and values, which the edited rows reuse
            self._layers_later = False
            self._base_forward(reuse=True)
        starts = [self._start(k) for k in todo]
        order = sorted(range(len(todo)), key=lambda i: (-starts[i], i))
        scores = {self.prompt: self.original_logprob}
        done = 0
        costs = [len(k) + len(self.target) - s for k, s in zip(todo, starts)]  # positions each row recomputes
        cost_done, cost_total = 0, sum(costs)
        if todo and self.progress is not None and self.sizer is not None and self.sizer.inside is not None:
            # the rows to come, before the first batch whose layers the sizer reports (a job's time left inside it)
            report(self.progress, self.stage, 0, len(todo), Cost(0, cost_total))
        pos = 0
        while pos < len(order):
            self._check_cancel()
            size = self._pack_rows(order, starts, todo, pos)
            packed = size > 0
            size = size or self._batch_rows(order, starts, todo, pos)
            rows = [todo[i] for i in order[pos:pos + size]]
            row_starts = [starts[i] for i in order[pos:pos + size]]
            start = min(row_starts)
            recomputed = sum(len(r) + len(self.target) - (s if packed else start) for r, s in zip(rows, row_starts))
            t_start = time.perf_counter()
            with self.threads.batch(recomputed) as threads, layer_shares(self.lm.model, self.sizer, len(rows)):
                if packed:
                    logp = self._packed_forward([r + self.target for r in rows], row_starts)
                else:
                    logp, _ = self._forward([r + self.target for r in rows], start=start, cache=self._layers,
                                            keep_cache=False)
            seconds = time.perf_counter() - t_start
            if self.sizer is not None:
                self.sizer.record(len(rows), seconds)
            if logger.isEnabledFor(logging.DEBUG):  # per-batch cost (benchmarks/bench_loo_word_slowdown.py reads it)
                width = max(len(r) for r in rows) + len(self.target) - start
                logger.debug("%s batch: %d rows from token %d, %d positions %s, %d thread(s), %.3f s", self.stage,
                             len(rows), start, recomputed if packed else width, "packed" if packed else "each",
                             threads, seconds)
            t0, t1 = self.span
            for r, lp in zip(rows, logp):
                scores[r] = float(lp[t0:t1].astype(np.float64).sum())
            self._count(len(rows), sum(len(r) + len(self.target) for r in rows), recomputed)
            cost_done += sum(costs[i] for i in order[pos:pos + size])
            pos += size
            done += len(rows)
            if self.progress is not None:
                report(self.progress, self.stage, done, len(todo), Cost(cost_done, cost_total))
        return np.array([scores[tuple(int(i) for i in p)] for p in prompts], dtype=np.float64)

    def _start(self, prompt: tuple[int, ...]) -> int:
        """First position a row recomputes: after the prefix it shares with the unedited row, and at
        the latest its last prompt token (whose logits predict the first target token)."""
        if self._layers is None:
            return 0
        shared = common_prefix(prompt + self.target, self.prompt + self.target)
        return max(0, min(shared, len(prompt) - 1))

    def _batch_rows(self, order: list[int], starts: list[int], todo: list[tuple[int, ...]], pos: int) -> int:
        """Rows in the next batch: at most `cap`, within the token budget (rows x recomputed tokens), and
        only while starting them all at the batch's shortest prefix recomputes at most MAX_EXTRA more
        tokens than starting each at its own (on a CPU, work is tokens; batching saves little)."""
        cap = self.batch_size if self.sizer is None else self.sizer.units(self.batch_size)
        size, own = 0, 0
        while pos + size < len(order) and size < cap:
            rows = order[pos:pos + size + 1]
            start = min(starts[j] for j in rows)
            longest = max(len(todo[j]) for j in rows) + len(self.target) - start
            own_next = own + len(todo[rows[-1]]) + len(self.target) - starts[rows[-1]]
            if size > 0 and ((size + 1) * longest > self.budget or (size + 1) * longest > (1 + MAX_EXTRA) * own_next):
                break
            size, own = size + 1, own_next
        return max(1, size)

    def _pack_rows(self, order: list[int], starts: list[int], todo: list[tuple[int, ...]], pos: int) -> int:
        """Rows in the next packed batch (each from its own start, no padding): at most `batch_size`, at most
        `budget` packed positions, and at most PACK_ELEMENTS attention scores over the prefix and the packed
        positions; with `slice_s` (a server: clicks wait for a forward), at most PACK_FORWARDS times the unedited
        prompt's positions, at least one row. 0: no packing (off, no cached prefix, or the next row alone is larger:
        a padded batch takes it)."""
        if not self.packing or self._layers is None:
            return 0
        cap = self.batch_size
        heads = int(self.lm.model.config.num_attention_heads)
        timed = PACK_FORWARDS * (len(self.prompt) + len(self.target)) if self.sizer is not None else float("inf")
        prefix = starts[order[pos]]  # rows are sorted by start, latest first: the batch's longest prefix
        size, width = 0, 0
        while pos + size < len(order) and size < cap:
            j = order[pos + size]
            grown = width + len(todo[j]) + len(self.target) - starts[j]
            if grown > self.budget or heads * grown * (prefix + grown) > PACK_ELEMENTS or (size and grown > timed):
                break
            size, width = size + 1, grown
        return size

    def _packed_forward(self, rows: list[tuple[int, ...]], starts: list[int]) -> np.ndarray:
        """One forward of rows[b][starts[b]:], packed into one sequence without padding, each over the cached
        unedited prefix before its own start (shared_prefix.packed_attention). Returns <float32>[B, T] target
        log-probs as numpy."""
        lm, dev, T = self.lm, self.lm.device, len(self.target)
        lengths = torch.tensor([len(r) - s for r, s in zip(rows, starts)])  # [B] positions each row recomputes
        start_t = torch.tensor(starts)
        ids = torch.tensor([i for r, s in zip(rows, starts) for i in r[s:]], dtype=torch.long)  # [Q]
        position_ids = torch.cat([s + torch.arange(n) for s, n in zip(starts, lengths.tolist())])  # [Q]
        ends = torch.cumsum(lengths, 0)  # [B] where each row ends in the packed sequence
        keep = (ends[:, None] - T - 1 + torch.arange(T)[None, :]).reshape(-1)  # [B*T] the logits predicting t
        prefix = max(starts)
        with torch.no_grad():
            embeds = lm.model.get_input_embeddings()(ids[None].to(dev))  # [1, Q, D]
            packed = (shared_prefix.layer_prefix(self._layers, prefix),
                      shared_prefix.packed_mask(start_t, lengths, prefix).to(dev))
            with shared_prefix.prefix_attention(lm.model, shared_prefix.PACKED_NAME):
                out = lm.model(inputs_embeds=embeds, position_ids=position_ids[None].to(dev), use_cache=False,
                               logits_to_keep=keep.to(dev), packed_prefix=packed)
            B = len(rows)
            logits = out.logits.reshape(B, T, -1)  # [B, T, V]
            target = torch.tensor(self.target, dtype=torch.long, device=dev).expand(B, -1)  # [B, T]
            logp = gather_target_logprobs(logits, torch.arange(T, device=dev).expand(B, -1), target,
                                          torch.ones(B, T, dtype=torch.bool, device=dev))  # [B, T]
        self.stats.shared_batches += 1
        self.stats.packed_batches += 1
        return logp.cpu().numpy()

    def _forward(self, rows: list[tuple[int, ...]], start: int, cache, keep_cache: bool):
        """Forward of rows[b][start:] over the cached rows[b][:start] (start = 0: no cache).

        Returns (<float32>[B, T] target log-probs as numpy, the model's cache when keep_cache).
        """
        lm = self.lm
        dev = lm.device
        B = len(rows)
        T = len(self.target)
        lengths = [len(r) for r in rows]
        width = max(lengths) - start
        pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else (lm.tokenizer.eos_token_id or 0)
        ids = torch.full((B, width), int(pad), dtype=torch.long)  # [B, S] right-padded suffixes
        mask = torch.zeros(B, start + width, dtype=torch.long)  # [B, start + S] prefix + suffix
        pred = torch.zeros(B, T, dtype=torch.long)  # [B, T] suffix index of the logits predicting t
        for b, r in enumerate(rows):
            ids[b, :len(r) - start] = torch.tensor(r[start:])
            mask[b, :len(r)] = 1
            pred[b] = len(r) - T - 1 + torch.arange(T) - start
        position_ids = (start + torch.arange(width)).expand(B, -1)  # [B, S]
        with torch.no_grad():
            embeds = lm.model.get_input_embeddings()(ids.to(dev))  # [B, S, D]
            # One row holds one copy of the prefix either way: the shared path's second attention call and merge
            # pay off from two rows on.
            shared = cache is not None and start > 0 and self.shared_prefix and B > 1
            kwargs = dict(inputs_embeds=embeds, position_ids=position_ids.to(dev),
                          use_cache=keep_cache or (cache is not None and not shared))
            if shared:  # the prefix part of attention once per batch, against the uncopied prefix (shared_prefix.py)
                kwargs["shared_prefix"] = shared_prefix.layer_prefix(cache, start)
                self.stats.shared_batches += 1
            else:
                kwargs["attention_mask"] = mask.to(dev)
            if cache is not None and start > 0 and not shared:
                kwargs[cache_argument(type(lm.model))] = self._prefix_cache(cache, start, B)
            offset = 0
            if supports_logits_to_keep(type(lm.model)):
                keep = width - int(pred.min())
                kwargs["logits_to_keep"] = keep
                offset = width - keep
            with shared_prefix.prefix_attention(lm.model) if shared else contextlib.nullcontext():
                out = lm.model(**kwargs)
            target = torch.tensor(self.target, dtype=torch.long, device=dev).expand(B, -1)  # [B, T]
            logp = gather_target_logprobs(out.logits, (pred - offset).to(dev), target,
                                          torch.ones(B, T, dtype=torch.bool, device=dev))  # [B, T]
        return logp.cpu().numpy(), (returned_cache(out) if keep_cache else None)

    def _prefix_cache(self, layers, start: int, batch: int):
        """A fresh cache holding the first `start` positions of the unedited row, for `batch` rows."""
        from transformers import DynamicCache  # pylint: disable=import-outside-toplevel

        data = [(k[:, :, :start].expand(batch, -1, -1, -1), v[:, :, :start].expand(batch, -1, -1, -1))
                for k, v in layers]  # each [B, H, start, Dh]
        return DynamicCache(data, config=self.lm.model.config)

    def _count(self, rows: int, tokens: int, computed: int) -> None:
        self.stats.rows += rows
        self.stats.tokens += tokens
        self.stats.computed += computed

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise ComputationCancelled(f"{self.stage} cancelled after {self.stats.rows - 1} ablated prompts")
