"""One loaded model shared by every LIT wrapper: the owner of its lock, composing single-purpose parts.

`SharedLM` holds one `sequence_salience` LanguageModel, its model lock (a `ModelScheduler`,
lit_app/model/scheduler.py) and these parts, each in its own file:

* `prompts` (lit_app/model/prompt_tokens.py): prompts and tokens with a tokenizer copy, without the model lock;
* `responses` (lit_app/model/responses.py): greedy generation, cached in memory and on disk, streamed while it runs;
* `store` (lit_app/model/salience_store.py): salience results, partial results and segment values, by prompt + target;
* `runs` (lit_app/model/salience_runs.py): salience computed under the lock and kept in the store;
* `jobs` (lit_app/model/jobs_table.py): the one table of jobs (lit_app/model/jobs.py) its clients started: spans, background
  matrices and segment methods, explanation tests and intervention runs, the value index's build
  (`value_index()`, lit_app/model/value_index.py);

The wrappers (lit_app/wrappers/generation.py, salience.py, tokenizer.py, compare.py, inside.py, explain.py)
call the methods below, which hand each call to its part. That is the one way into the model: the loaded
`lm` and its `lock` are this room's (and its parts'); a wrapper that runs a core-library function on the
model itself (an explanation test, a trace) holds it with `model(priority)`, which hands out the loaded model
for the block only, lets waiting work go first between its chunks with `yield_to_waiting()`, and reads the
model's architecture and value index through `architecture()` and `value_index()`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

import sequence_salience as ss
from sequence_salience.ablation import AblationConfig, SegmentSalience
from sequence_salience import inside as ssi
from sequence_salience.compare import CrossLogprobs
from sequence_salience.salience import Cancel, Progress
from sequence_salience.slices import DEFAULT_SLICE_S
from lit_app import memory
from lit_app.schema.inputs import JsonDict, SegmentRequest
from lit_app.model.jobs_table import JobTable
from lit_app.model.jobs import DEFAULT_HEARTBEAT_S, Job
from lit_app.model.prompt_tokens import PromptTokens
from lit_app.model.responses import GenerationStream, Responses
from lit_app.model.salience_runs import Counts, SalienceRuns
from lit_app.model.salience_store import SalienceStore
from lit_app.model.scheduler import ModelScheduler, Priority
from lit_app.model.value_index import ValueIndexJob

# The server's --max_new_tokens: the longest response it generates. A row without its own budget gets
# min(field_rules.MAX_NEW_TOKENS.default (64), this); a row's own `max_new_tokens` (the shipped
# chain-of-thought row asks for 192) is capped by it (lit_app/model/responses.py `Responses.config_for`).
DEFAULT_MAX_NEW_TOKENS = 256
CACHE_SIZE = 32
# Salience results are cached up to this many bytes (a 4,000-token result with
# its Gram tensor is hundreds of MB).
DEFAULT_CACHE_BYTES = 2 * 1024**3


class SharedLM:
    """One loaded `sequence_salience` LanguageModel shared by all wrappers (module docstring).

    `lock` serializes every use of the model (generation, salience and the tokenization
    they do), so concurrent LIT requests queue instead of interfering; what a person waits
    for (`with lock:`) goes before work a person started and watches (`with lock.user_job():`:
    explanation tests, intervention runs, the value-index build), which goes before automatic
    background work (`with lock.background():`: the matrix jobs (`jobs`), blocking every-matrix
    requests); both hold it one time slice at a time (`slice_s`). Requests that only
    need tokens do not wait for it (`prompts`, lit_app/model/prompt_tokens.py).
    """

    def __init__(
        self,
        lm: ss.LanguageModel,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        salience_config: ss.SalienceConfig | None = None,
        cache_size: int = CACHE_SIZE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        disk_cache: bool | str = True,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        slice_s: float = DEFAULT_SLICE_S,
        lock: ModelScheduler | None = None,
        ablation_config: AblationConfig | None = None,
    ):
        """Args:
          lm: a loaded `sequence_salience.LanguageModel`.
          max_new_tokens: longest greedy response (the server's --max_new_tokens: caps every row's budget,
            lit_app/model/responses.py `Responses.config_for`).
          salience_config: base `SalienceConfig` (the extra methods' counts come from each
            request; their other settings, e.g. SmoothGrad's noise and seed, from here).
          cache_size: how many generations and salience results to keep in memory.
          cache_bytes: most bytes of salience results kept in memory.
          disk_cache: keep generations on disk (True: under the library's cache dir;
            a path: there; False: memory only), so a restarted server shows them at once.
          heartbeat_s: a background job nobody polls for this long is cancelled.
          slice_s: model time of one background slice (seconds): every-matrix computations
            run in slices of about this long and let waiting clicks have the model between
            them (sequence_salience/slices.py, lit_app/model/scheduler.py).
          lock: the model lock to use (a fresh ModelScheduler when None; tests pass one that records).
          ablation_config: base `AblationConfig` of the segment methods (the server's --attention_estimator; each
            request sets its removal and count).
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}; it must be at least 1.")
        if not slice_s > 0:
            raise ValueError(f"slice_s={slice_s}; it must be a positive number of seconds (e.g. 0.25).")
        self.lm = lm
        self.lock = lock if lock is not None else ModelScheduler()
        # Each time the model is let go, the pass's freed memory goes back to the OS (at most every 2 s):
        # glibc kept it, and RSS grew with every larger pass (issue 33).
        self.lock.on_free = memory.trim_soon
        self.prompts = PromptTokens(lm, self.lock)
        self.responses = Responses(lm, self.lock, max_new_tokens, cache_size, disk_cache)
        self.store = SalienceStore(self.responses, cache_size, cache_bytes)
        config = salience_config if salience_config is not None else ss.SalienceConfig()
        self.runs = SalienceRuns(lm, self.lock, self.responses, self.store, self.prompts, config, float(slice_s),
                                 ablation_config if ablation_config is not None else AblationConfig())
        self.jobs = JobTable(heartbeat_s=heartbeat_s)
        self._architecture: ssi.Architecture | None = None
        self._value_indexes: dict[int, ValueIndexJob] = {}

    # The model itself, for a wrapper that runs a core-library function on it (module docstring).

    @contextlib.contextmanager
    def model(self, priority: Priority = Priority.INTERACTIVE) -> Iterator[ss.LanguageModel]:
        """The loaded model, held at `priority` (lit_app/model/scheduler.py) while the block runs: a person waits for
        it (INTERACTIVE: a trace, a search), or a person started it and watches (USER_JOB: an explanation test,
        an intervention run). Re-entrant. Use it inside the block only."""
        with self.lock.at(priority):
            yield self.lm

    def yield_to_waiting(self) -> bool:
        """Between two chunks of work that holds the model: the waiting work that goes first uses it, then the
        holder takes it back (`ModelScheduler.yield_to_waiting`); whether anybody went first."""
        return self.lock.yield_to_waiting()

    def architecture(self) -> ssi.Architecture:
        """Where the model's layers and modules are (sequence_salience.inside), resolved on first use, so an
        unsupported model fails its inside requests, not server start."""
        if self._architecture is None:
            self._architecture = ssi.resolve_architecture(self.lm.model)
        return self._architecture

    def value_index(self, top_k: int = ssi.value_index.DEFAULT_TOP_K) -> ValueIndexJob:
        """The value index of this model's MLP value vectors (one per `top_k`), built once a search starts it as
        one job of `jobs` (lit_app/model/value_index.py): each layer one slice of the scheduler at the user-job
        level of the searching client, so clicks go first and automatic matrix jobs wait."""
        if top_k not in self._value_indexes:
            self._value_indexes[top_k] = ValueIndexJob(self.lm, self.lock.user_job, self.jobs, top_k)
        return self._value_indexes[top_k]

    @property
    def name(self) -> str:
        return str(getattr(self.lm, "name", "model"))

    @property
    def source(self) -> str:
        """What ss.load_model is given to load this model again (a shared page's notebook cell): the model's
        `source`; its name when it was built in memory."""
        return getattr(self.lm, "source", None) or self.name

    @property
    def dtype(self) -> str:
        return str(getattr(self.lm, "dtype", "")).replace("torch.", "")

    @property
    def generation_config(self) -> ss.GenerationConfig:
        """The server's generation settings (its `max_new_tokens`: the cap of every row's budget)."""
        return self.responses.config

    def generation_config_for(self, chat: ss.ChatPrompt) -> ss.GenerationConfig:
        """The generation settings of `chat`'s response: its row's budget, capped by the server's."""
        return self.responses.config_for(chat)

    @property
    def salience_config(self) -> ss.SalienceConfig:
        """The server's base salience settings (the extra methods' counts come from each request)."""
        return self.runs.config

    @property
    def slice_s(self) -> float:
        """Model time of one background slice, in seconds."""
        return self.runs.slice_s

    # Prompts and tokens (lit_app/model/prompt_tokens.py): never wait for the model.

    def format_prompt(self, ex: JsonDict) -> ss.ChatPrompt:
        return self.prompts.format_prompt(ex)

    def tokens(self, chat: ss.ChatPrompt, target: str) -> list[str]:
        return self.prompts.tokens(chat, target)

    # Greedy responses (lit_app/model/responses.py).

    def generate(self, chat: ss.ChatPrompt) -> ss.Generation:
        return self.responses.generate(chat)

    def cached_generation(self, chat: ss.ChatPrompt) -> ss.Generation | None:
        return self.responses.cached(chat)

    def generation_stream(self, chat: ss.ChatPrompt, after: int | None = None,
                          wait_s: float = 0.0) -> GenerationStream:
        return self.responses.stream(chat, after, wait_s)

    def explained(self, chat: ss.ChatPrompt, target: str) -> str | ss.Generation:
        return self.responses.explained(chat, target)

    # Salience (lit_app/model/salience_runs.py) and what is cached of it (lit_app/model/salience_store.py).

    def methods_and_config(self, counts: Counts = None) -> tuple[tuple[str, ...], ss.SalienceConfig]:
        return self.runs.methods_and_config(counts)

    def salience(self, chat: ss.ChatPrompt, target: str, counts: Counts = None, job: Job | None = None,
                 cancel: Cancel | None = None) -> ss.SalienceResult:
        return self.runs.salience(chat, target, counts, job=job, cancel=cancel)

    def quick(self, chat: ss.ChatPrompt, target: str, t0: int, t1: int | None, counts: Counts = None,
              cancel: Cancel | None = None, progress: Progress | None = None,
              job: Job | None = None) -> ss.SalienceResult:
        return self.runs.quick(chat, target, t0, t1, counts, cancel=cancel, progress=progress, job=job)

    def span_salience(self, chat: ss.ChatPrompt, target: str, t0: int, t1: int,
                      counts: Counts = None) -> dict[str, np.ndarray]:
        return self.runs.span_salience(chat, target, t0, t1, counts)

    def segment_salience(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest,
                         job: Job | None = None, cancel: Cancel | None = None) -> SegmentSalience:
        return self.runs.segment_salience(chat, target, request, job=job, cancel=cancel)

    def check_pattern(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest) -> None:
        self.runs.check_pattern(chat, target, request)

    def segment_config(self, request: SegmentRequest) -> AblationConfig:
        return self.runs.segment_config(request)

    def exact_values_of(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest) -> SegmentSalience | None:
        return self.runs.exact_values_of(chat, target, request)

    def cross_logprobs(self, chat_a: ss.ChatPrompt, target_a: str,
                       chat_b: ss.ChatPrompt) -> tuple[CrossLogprobs, int]:
        return self.runs.cross_logprobs(chat_a, target_a, chat_b)

    def cached_salience(self, chat: ss.ChatPrompt, target: str, counts: Counts = None) -> ss.SalienceResult | None:
        return self.runs.cached_salience(chat, target, counts)

    def cached_span(self, chat: ss.ChatPrompt, target: str, method: str, t0: int = 0,
                    t1: int | None = None) -> np.ndarray | None:
        return self.store.span(chat, target, method, t0, t1)

    def cached_segments(self, chat: ss.ChatPrompt, target: str, request: SegmentRequest) -> SegmentSalience | None:
        return self.store.segments_of(chat, target, request)

    def forget_salience(self) -> None:
        """Drops every cached salience result (benchmarks time cold requests); generations stay cached."""
        self.store.clear()
