"""Salience computed on the shared model and kept in its SalienceStore (lit_app/model/salience_store.py).

`SalienceRuns` turns a request's prompt, target and extra methods' counts into core-library calls
under the model's scheduler (lit_app/model/scheduler.py):

* `salience`: every matrix (a complete result), background work in time slices of `slice_s`
  between which waiting clicks use the model;
* `quick`: the exact salience of one span now (a partial result merged with what is cached; a request with extra
  methods' counts takes the gradient methods' spans from the count-free complete or partial result); its gradient pass
  runs with the torch thread count that `threads` (per loaded model, one `ThreadChooser` per size class of pass:
  sequence_salience/threads.py `PassSizes`) measured to be cheaper across the requests so far: at load 11-20 on
  2 cores a short prompt's pass took 16-78 s with 2 threads and 4-5 s with 1 (docs/benchmarks.md,
  benchmarks/bench_gradient_threads.py);
* `segment_salience`: a segment method's values, background work in forward batches, each with the thread count
  that `forward_threads` (per loaded model, a `PassSizes` of its own: a forward costs less per token than a gradient
  pass) measured across the jobs so far. A chooser per job tried 2 threads on its second batch in every job (on
  free cores; sequence_salience/threads.py puts tries off on contested ones): the first map's job runs 3-4 batches
  since they are packed (ablation/prefix.py), so each job spent one on a try and chose from one batch of each count
  (at load ~9 on 2 cores a 10-position forward took 1.6 s with 2 threads against 0.1 s with 1, docs/benchmarks.md
  "Session 34 (h2)"); the first map's job holds the model as a user job, ahead of the page's matrices
  (`segment_priority`) and takes the unedited prompt's keys, values and span attention that the first highlight's
  pass left (`quick`: compute_span_result(record=record_short), up to UNEDITED_MAX_TOKENS), running no unedited forward;
* `span_salience`: a span of a complete result (grad_norm without a Gram tensor: one backward);
* `cross_logprobs`: one response under two prompts.

Each looks in the store first and stores what it computes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

import numpy as np

import sequence_salience as ss
from sequence_salience.ablation import (AblationConfig, Cost, SegmentSalience, costed, removable_segments,
                                        segment_salience, span_recorder)
from sequence_salience.compare import CrossLogprobs, response_logprobs
from sequence_salience.methods import DEFAULT_METHODS, get_segment_method, grad_norm, list_segment_methods
from sequence_salience.salience import Cancel, Progress
from sequence_salience.aggregate import match_spans
from sequence_salience.methods.sampling import point_row_cost
from sequence_salience.slices import SliceSizer
from sequence_salience.threads import PassSizes
from lit_app.errors import prompt_start
from lit_app.schema.inputs import SegmentRequest
from lit_app.schema.method_registry import FIRST_LOOK_METHOD, FIRST_MAP_METHOD, REQUEST_SEGMENT_METHOD
from lit_app.model.jobs import Job
from lit_app.model.time_left import Then
from lit_app.model.lru_cache import LRUCache
from lit_app.model.prompt_tokens import PromptTokens
from lit_app.schema.method_registry import COUNT_FIELDS, EXTRA_METHODS
from lit_app.model.responses import Responses
from lit_app.model.salience_store import SalienceStore, pair_key
from lit_app.model.scheduler import ModelScheduler, Priority

logger = logging.getLogger(__name__)

# {count field: count} of the extra methods (lit_app/schema/method_registry.py); None or absent = 0 (off).
Counts = Mapping[str, int] | None
V = TypeVar("V")


def _name(chat: ss.ChatPrompt) -> str:
    """How the log names a computation on `chat`: the start of the user's message (of the whole text when the
    prompt has no roles)."""
    return prompt_start(next((chat.text[s:e] for s, e, role in chat.role_spans if role == "user"), chat.text))


def log_progress(chat: ss.ChatPrompt, every_s: float = 2.0) -> Progress:
    """A core-library progress callback that logs at most every `every_s` seconds (and at the end); each line
    names the prompt of `chat` (which of several computations it is)."""
    last = [time.monotonic()]
    name = _name(chat)

    def report(method: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= every_s:
            last[0] = now
            logger.info("salience %s: %d/%d (prompt %s)", method, done, total, name)

    return report


# The first highlight's pass keeps the unedited prompt's keys and values for the segment job of its span (the first
# map: no unedited forward of its own; result.UneditedForward) up to this many tokens: a 4,000-token prompt with its
# template and a response of up to 256 tokens (--max_new_tokens' default). Kept: 45 kB per token on the default model
# (keys and values; the span's attention ~1 kB), ~190 MB at the limit, until the segment job takes it. The pass
# recomputes its layers as every gradient pass does (methods/gradients.py kept_once_cache); measured on a 3,882-token
# pair it peaked at +2.2-2.4 GB against +1.4-1.6 GB without recording (docs/benchmarks.md, "Session 35 (h1)").
# Longer pairs record nothing.
UNEDITED_MAX_TOKENS = 4352


def record_short(lm, n_prompt_tokens: int, n_tokens: int, span: tuple[int, int]):
    """compute_span_result's `record`: ablation.span_recorder up to UNEDITED_MAX_TOKENS positions, else None (the
    pass records and keeps nothing)."""
    return span_recorder(lm, n_prompt_tokens, n_tokens, span) if n_tokens <= UNEDITED_MAX_TOKENS else None


def sampled_after(methods: tuple[str, ...], config: ss.SalienceConfig) -> Callable[[str, int], Then | None]:
    """`then(stage, total)`: the work after a matrix job's gradient rows (`stage` a method without a count, `total`
    its targets), counted in their time left (time_left.Then): the next method with a count, its units (IG: a target
    x step, one point row each; SmoothGrad: a target, `samples` rows) each costing sampling.point_row_cost of a
    gradient row, that is of the rows' whole sequence over `total` (the low end: only IG's first count of a step
    search, which may stop there). None for any other stage. Was (issue 44): while
    an IG matrix job's rows ran, its time left was theirs alone ("1-6 s left" with ~38 s left)."""
    low, high = point_row_cost()

    def then(stage: str, total: int) -> Then | None:
        if stage not in methods or ss.get_method(stage).count is not None or total <= 0:
            return None
        nxt = next((ss.get_method(m) for m in methods[methods.index(stage) + 1:] if ss.get_method(m).count), None)
        if nxt is None:
            return None
        rows = 1 if nxt.progress_counts else nxt.span_units(config)  # point rows per unit of the next method
        # IG's step search announces every count up to its cap and may stop after the first: the low end counts that
        first = nxt.count_in(config) / nxt.span_units(config)
        return Then(nxt.progress_total(total, config), low * rows / total * first, high * rows / total)

    return then


# The key of a segment job's `partial` (Job.partial): the SegmentSalience of its results so far.
PARTIAL_SEGMENTS = "segments"


def segment_priority(request: SegmentRequest) -> Priority:
    """The scheduler level of a segment job: USER_JOB for the first map at its granularity (the person waits for it
    on screen, method_registry.FIRST_MAP_METHOD), so that the page's per-token matrices, started by the same first
    highlight at BACKGROUND, no longer take every other slice from it; BACKGROUND for every other segment job."""
    first = FIRST_MAP_METHOD.get(request.granularity)
    return Priority.USER_JOB if first is not None and first == request.method else Priority.BACKGROUND


def sends_first_look(request: SegmentRequest) -> bool:
    """Whether the job of `request` keeps its values so far (Job.partial) for its answers: the first map's job at a
    granularity where method_registry.FIRST_LOOK_METHOD names its first look (no worse than the gradient on the
    held-out figures), and the measure button's job (REQUEST_SEGMENT_METHOD) where its method reports a first look
    (word_verified: its estimate of every word, then the words measured after each batch); elsewhere its values only."""
    if segment_priority(request) == Priority.USER_JOB:
        return FIRST_LOOK_METHOD.get(request.granularity) is not None
    return (REQUEST_SEGMENT_METHOD.get(request.granularity) == request.method
            and get_segment_method(request.method).first_look is not None)


class SalienceRuns:
    """Salience of one loaded model, computed under its scheduler and cached (module docstring)."""

    def __init__(self, lm: ss.LanguageModel, scheduler: ModelScheduler, responses: Responses, store: SalienceStore,
                 prompts: PromptTokens, config: ss.SalienceConfig, slice_s: float,
                 ablation: AblationConfig = AblationConfig()):
        """Args:
          lm: the loaded model; scheduler: its lock; responses: its greedy responses (the targets of
            requests without one); store: where results are kept; prompts: the tokenizer copy (a pair's tokens
            without the model lock: `check_pattern`).
          config: base `SalienceConfig` (the extra methods' counts come from each request).
          slice_s: model time of one background slice, in seconds.
          ablation: base `AblationConfig` of the segment methods (e.g. the attention estimator file; the removal
            and count come from each request).
        """
        self._lm = lm
        self._lock = scheduler
        self._responses = responses
        self._prompts = prompts
        self.store = store
        self.config = config
        self.slice_s = slice_s
        self.ablation = ablation
        # Seconds the spans' passes let waiting clicks use the model (`quick`'s yields): not counted as a pass's cost.
        self._yielded_s = 0.0
        # The thread count of the spans' gradient passes, measured across requests in model time (module docstring).
        self.threads = PassSizes(clock=self._model_time)
        # The thread count of the segment jobs' forward batches, measured across jobs (module docstring).
        self.forward_threads: PassSizes | None = PassSizes()

    def _model_time(self) -> float:
        """Seconds of the spans' model time: wall time less what their passes yielded to waiting clicks."""
        return time.perf_counter() - self._yielded_s

    def methods_and_config(self, counts: Counts = None) -> tuple[tuple[str, ...], ss.SalienceConfig]:
        """The default methods plus each extra method whose count is > 0; the config with those counts.

        counts: {count field: count} of the extra methods (`inputs.extra_counts`); absent = 0 (off).
        The config is part of every cache key, so results with other counts are kept apart; the
        other settings of a counted method (e.g. SmoothGrad's noise and seed) come from the server's
        `config`.
        """
        counts = counts or {}
        methods = list(DEFAULT_METHODS)
        config = self.config
        for extra in EXTRA_METHODS:
            if counts.get(extra.field, 0) > 0:
                methods.append(extra.method)
                config = dataclasses.replace(config, **{extra.field: int(counts[extra.field])})
        available = set(ss.list_methods())
        return tuple(m for m in methods if m in available), config

    def cached_salience(self, chat: ss.ChatPrompt, target: str, counts: Counts = None) -> ss.SalienceResult | None:
        """The complete result if it is in memory, else None; never runs the model."""
        return self.store.complete_of(chat, target, *self.methods_and_config(counts))

    def _sizer(self, job: Job | None) -> SliceSizer:
        """Slices of `slice_s`; a click or a user job that arrives inside a backward goes at the next layer
        boundary, without waiting for the rest of the slice; another client's matrix job gets the model between
        chunks only once this computation has freed its forward's graph (scheduler.py: one retained graph at a
        time). `job` (when given) is told the share of each chunk's layers done (`Job.report_within`): a time left
        before the first chunk ends."""
        return SliceSizer(self.slice_s, urgent=self._lock.outranked, release_graph=self._lock.graph_waiting,
                          inside=job.report_within if job is not None else None)

    def _slice_progress(self, chat: ss.ChatPrompt, job: Job | None, sizer: SliceSizer,
                        then: Callable[[str, int], Then | None] | None = None) -> Progress:
        """Progress of background work on `chat`: to `job` (when given) and the log; then the clicks that arrived
        during the slice or batch get the model. then(stage, total): the work known to follow (`sampled_after`)."""
        log, yield_ = log_progress(chat), self._yield(job, sizer)

        @costed  # an ablation's rows come with their known cost (recomputed positions): the time left counts it
        def progress(stage: str, done: int, total: int, cost: Cost | None = None) -> None:
            if job is not None:
                job.report(done, total, then=None if then is None else then(stage, total),
                           cost=None if cost is None else (cost.done, cost.total))
            log(stage, done, total)
            yield_()

        return progress

    def _waits(self, job: Job | None, shared: bool = False) -> contextlib.AbstractContextManager[object]:
        """`job.waiting` when `job` is given: its status says so, and whose work goes first (its own client's or
        another's: scheduler.py `whose_turn`), without an estimate; `shared`: an equal goes first (`Job.waiting`)."""
        return job.waiting(self._lock.whose_turn(), shared) if job is not None else contextlib.nullcontext()

    def _yield_waiting(self, job: Job | None, holding_graph: bool = False) -> bool:
        """`yield_to_waiting`, with `job` marked as waiting (its status says so, without an estimate) while a click
        or more urgent work goes first, and as sharing the model (`Job.share`: its status says so, with the
        estimate, whose rate counts the equal's turns) while equal work takes turns with it (`equal_waiting`,
        asked at every slice boundary, whoever goes first). Whether anybody went first."""
        if job is not None:
            job.share(self._lock.equal_waiting())
        return self._lock.yield_to_waiting(holding_graph=holding_graph,
                                           while_waiting=None if job is None else functools.partial(self._waits, job))

    def _yield(self, job: Job | None, sizer: SliceSizer) -> Callable[[], object]:
        """`_yield_waiting` between slices, saying whether the computation keeps its forward's graph across the
        pause (`sizer.holding_graph`)."""
        return lambda: self._yield_waiting(job, sizer.holding_graph)

    def _in_background(self, cache: LRUCache[V], key: Hashable, compute: Callable[[], V],
                       job: Job | None = None, graph: bool = False, priority: Priority = Priority.BACKGROUND) -> V:
        """The cached value of `key`, else `compute()` as background work (stored; `priority`: the level it holds
        the model at); `job`'s status says "waiting" until it holds the model. graph: `compute` keeps a forward's
        graph across its slices (scheduler.py `acquire`)."""
        out = cache.get(key)
        if out is None:
            with self._waits(job):  # "waiting" while queued
                self._lock.acquire(priority, graph=graph)
            try:
                out = cache.get(key)  # computed while this waited for the model
                if out is None:
                    out = compute()
                    cache.put(key, out)
            finally:
                self._lock.release()
        return out

    def salience(self, chat: ss.ChatPrompt, target: str, counts: Counts = None, job: Job | None = None,
                 cancel: Cancel | None = None) -> ss.SalienceResult:
        """SalienceResult for prompt + target (the greedy response when target is empty), cached.

        Every matrix is background work for the scheduler: it runs in time slices of
        `slice_s` and lets waiting interactive requests (clicks, traces, the first
        highlight) use the model between slices.

        counts: {count field: count} of the extra methods (absent or 0: not computed).
        job: when given (a background job), progress goes to it and it is checked for
          cancellation after every slice.
        cancel: without a job (a blocking request), checked once the model is ours and after
          every slice (a `lit_app.model.cancel.Cancel`); raises ComputationCancelled when it returns True.
        """
        explained = self._responses.explained(chat, target)
        methods, config = self.methods_and_config(counts)

        def compute() -> ss.SalienceResult:
            if job is None:
                logger.info("Blocking salience request: computing every matrix (%s) in background slices (prompt %s).",
                            ", ".join(methods), _name(chat))
            sizer = self._sizer(job)
            return ss.compute_salience(self._lm, chat, explained, methods=methods, config=config,
                                       progress=self._slice_progress(chat, job, sizer, sampled_after(methods, config)),
                                       cancel=job.should_stop if job is not None else cancel,
                                       slice_s=sizer, between_slices=self._yield(job, sizer))

        return self._in_background(self.store.complete, pair_key(chat, target, explained) + (methods, config),
                                   compute, job, graph=True)

    def segment_config(self, request: SegmentRequest) -> AblationConfig:
        """The AblationConfig a segment request runs with: the server's base (`ablation`), the request's removal and
        its count (the surrogate's random ablations)."""
        config = dataclasses.replace(self.ablation, removal=request.removal)
        if request.count:
            config = dataclasses.replace(config, **{get_segment_method(request.method).count_field: request.count})
        return config

    def segment_salience(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest,
                         job: Job | None = None, cancel: Cancel | None = None) -> SegmentSalience:
        """`sequence_salience.ablation.segment_salience` of `request` (inputs.SegmentRequest), cached.

        Work for the scheduler in forward batches, time slices of `slice_s` between which waiting clicks use the
        model: background work as every matrix, but the first map's job (`segment_priority`) as a user job, ahead
        of the page's matrices. job: progress (rows done / rows) goes to it and it is checked for cancellation
        between batches, and where `sends_first_look`, a method's results so far (attention_verified: its estimate
        before any verification, then after each batch; ablation.segment_salience `partial`) are its `partial`,
        {PARTIAL_SEGMENTS: SegmentSalience}; cancel: the check without a job.
        """
        explained = self._responses.explained(chat, target)
        key = pair_key(chat, target, explained) + (request,)
        if job is not None:
            cancel = job.should_stop
        # Any cached result of this pair has its tokens and offsets: no tokenization under the model lock. One that
        # holds the span's gradient norm (the first highlight's) also spares attention_verified its backward.
        results = list(self.store.results_of(chat, target))
        t0, t1 = request.span if request.span is not None else (0, None)
        known = next((r for r in results if r.has_span(grad_norm.NAME, t0, t1)), next(iter(results), None))
        self.check_pattern(chat, target, request)
        config = self.segment_config(request)
        exact = self.exact_values_of(chat, target, request)

        sizer = self._sizer(job)
        report = self._slice_progress(chat, job, sizer)

        @costed
        def progress(stage: str, done: int, total: int, cost: Cost | None = None) -> None:
            if job is not None:  # a method scoring in stages (coarse_to_fine: "coarse pass", "refining") names it
                job.stage = "" if stage == request.method else stage
            report(stage, done, total, cost=cost)

        def keep_partial(seg: SegmentSalience) -> None:  # the map so far (attention_verified's estimate first)
            job.partial = {PARTIAL_SEGMENTS: seg}

        def compute() -> SegmentSalience:
            if cancel is not None and cancel():  # superseded or abandoned while it waited for the model
                raise ss.ComputationCancelled(f"{request.method} cancelled before it started")
            return segment_salience(self._lm, chat, explained, request.method, granularity=request.granularity,
                                    pattern=request.pattern, span=request.span, config=config, result=known,
                                    progress=progress, cancel=cancel, slice_s=sizer, known=exact,
                                    threads=self.forward_threads,
                                    partial=keep_partial if job is not None and sends_first_look(request) else None)

        return self._in_background(self.store.segments, key, compute, job, priority=segment_priority(request))

    def check_pattern(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest) -> None:
        """A user's segment pattern (granularity "regex") matched against the pair without the model or its lock, so
        that one that runs past its budget (aggregate.match_spans: 1 s of wall time) or leaves no removable segment
        is refused before the request waits for the model (was: after the wait and the unedited forward, 19 s at
        load 13 without a first highlight; issue 43). The pair's tokens: a cached result's, else the tokenizer
        copy's (`prompts`). Without a target, while the greedy response is not generated yet, the prompt's text alone
        is matched (a runaway pattern is refused; which segments it leaves is known once the response is).

        Raises:
          SalienceError: the pattern runs past its budget, or leaves no removable segment (the core's message).
        """
        if request.pattern is None or self.store.segments_of(chat, target, request) is not None:
            return
        known = next(self.store.results_of(chat, target), None)
        explained = target or self._responses.cached(chat)
        if known is None and explained is not None:
            known = self._prompts.pair_tokens(chat, explained)
        if known is None:
            match_spans(request.pattern, chat.text)
        else:
            removable_segments(known, request.granularity, request.pattern, None)

    def exact_values_of(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest) -> SegmentSalience | None:
        """A cached result, with this request's granularity, pattern, removal and span, of another method whose measured
        values are exact leave-one-out (record `exact_measured`: the first map attention_verified's verified
        segments), from which leave one out takes those values instead of scoring them again (the confirming job
        measures only the others); the library checks every setting (ablation.engine.known_values). None: none."""
        if not get_segment_method(request.method).exact_measured:
            return None
        for other in list_segment_methods():
            if other != request.method and get_segment_method(other).exact_measured:
                found = self.store.segments_of(chat, target, dataclasses.replace(request, method=other, count=0))
                if found is not None:
                    return found
        return None

    def quick(self, chat: ss.ChatPrompt, target: str, t0: int, t1: int | None, counts: Counts = None,
              cancel: Cancel | None = None, progress: Progress | None = None,
              job: Job | None = None) -> ss.SalienceResult:
        """A result that answers span (t0, t1) exactly: the complete result when cached, else a
        partial one (one forward + backward for the gradient methods; IG, SmoothGrad: one batch
        of steps or samples). `progress(method, done, total)` is called as the core library
        reports (IG: steps, SmoothGrad: samples), besides the log. job: the span job, whose status says
        "waiting" while another holds the model (`Job.waiting`: that time is not its units' cost)."""
        complete = self.cached_salience(chat, target, counts)
        methods, config = self.methods_and_config(counts)
        if complete is not None and all(complete.has_span(m, t0, t1) for m in methods):
            return complete
        explained = self._responses.explained(chat, target)
        pair = pair_key(chat, target, explained)
        pkey = pair + tuple(int((counts or {}).get(f, 0)) for f in COUNT_FIELDS)
        # Waiting for the model (another client's span, a background slice) is no work of this span: counted,
        # it made the pass's first rate and the IG steps after it (time_left.Then) "about 7–56 min" once (issue 43).
        with self._waits(job):
            self._lock.acquire()
        if job is not None:
            # The units begin now: the greedy generation above (the first highlight of a datapoint without a
            # target) is no part of the gradient pass's cost (counted, its seconds made the pass's first rate and,
            # through time_left.Then, the IG steps' estimate after it; issue 43).
            job.begin_sequence()
        try:
            partial = self.store.partial.get(pkey)
            # Gradient-method values do not depend on the extra counts: also look in the plain result, and in the
            # plain partial one (the first highlight's spans while its matrices compute; was: a count's first
            # request ran their gradient pass again, e.g. each IG step count chosen before the matrices were done).
            base = complete if complete is not None else self.cached_salience(chat, target)
            plain_key = pair + (0,) * len(COUNT_FIELDS)
            plain = self.store.partial.get(plain_key) if plain_key != pkey else None
            known = [r for r in (base, partial, plain) if r is not None]
            missing = [m for m in methods
                       if not any(r.has_span(m, t0, r.num_targets if t1 is None else t1) for r in known)]
            if missing:
                log = log_progress(chat)

                def report(method: str, done: int, total: int) -> None:
                    log(method, done, total)
                    if progress is not None:
                        progress(method, done, total)
                    # Between chunks of IG steps or SmoothGrad samples, the clicks that wait (another client's
                    # too) use the model first: a click is never behind another's long span (issue 43). Meanwhile
                    # the span's status says it waits, and the pause is no part of its units' rate (was: counted).
                    start = time.perf_counter()
                    if self._yield_waiting(job):
                        self._yielded_s += time.perf_counter() - start

                fresh = ss.compute_span_result(self._lm, chat, explained, methods=missing, t0=t0, t1=t1,
                                               config=config, progress=report, cancel=cancel, threads=self.threads,
                                               record=record_short)
                partial = self.store.partial.get(pkey)  # another request of this pair may have added to it meanwhile
                partial = fresh if partial is None else partial.merged(fresh)
                self.store.partial.put(pkey, partial)
            if plain is not None:  # its spans into the answer; the config stays this request's (with its counts)
                partial = plain if partial is None else partial.merged(plain)
            return partial if base is None else base.merged(partial) if partial is not None else base
        finally:
            self._lock.release()

    def span_salience(self, chat: ss.ChatPrompt, target: str, t0: int, t1: int,
                      counts: Counts = None) -> dict[str, np.ndarray]:
        """{method: <float32>[N]} for log p(target[t0:t1]).

        From the cached result (milliseconds); grad_norm falls back to one
        backward pass when the result was too large to keep its Gram tensor.
        """
        result = self.salience(chat, target, counts)
        out = {}
        for method in result.matrices:
            if not result.has_span(method, t0, t1):  # e.g. grad_norm without its Gram tensor
                _, config = self.methods_and_config(counts)
                with self._lock:
                    out[method] = ss.compute_span_salience(
                        self._lm, chat, self._responses.explained(chat, target), method, t0, t1, config=config)
            else:
                out[method] = result.span_salience(method, t0, t1)
        return out

    def cross_logprobs(self, chat_a: ss.ChatPrompt, target_a: str,
                       chat_b: ss.ChatPrompt) -> tuple[CrossLogprobs, int]:
        """A's response (typed, or its greedy generation) under prompt A and under prompt B, per token
        (`sequence_salience.compare.CrossLogprobs`), and how many forwards it ran: one for B, plus one
        for A when no cached result of A holds its log-probs (the salience module has shown A before)."""
        explained = self._responses.explained(chat_a, target_a)
        cached = self.store.logprobs(chat_a, target_a)
        forwards = 1
        with self._lock:
            under_b = response_logprobs(self._lm, chat_b, explained)
            if cached is not None and len(cached) == len(under_b.ids):
                under_a = dataclasses.replace(under_b, logprobs=np.asarray(cached, dtype=np.float64))
            else:
                under_a = response_logprobs(self._lm, chat_a, explained)
                forwards += 1
        return CrossLogprobs(under_a, under_b), forwards
