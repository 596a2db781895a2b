"""LIT wrappers for "Inside the model" (sequence_salience.inside), over the shared loaded model.

Three hidden LIT models share the `SharedLM` of lit_app/model/shared_model.py (its weights,
its model scheduler and its generation cache) and one `InsideState` (the resolved
architecture and the background value index):

* `_<name>_inside_trace`      prompt + target + `inside_t` -> per-layer trace of target token t
* `_<name>_inside_intervene`  ... + `interventions` -> before vs. after (trace, generation, salience),
                                in steps: a run is a job (lit_app/model/user_jobs.py) whose "status" carries
                                the probabilities first, then the regenerated text as it is produced,
                                then the salience; "cancel" stops it
* `_<name>_inside_search`     `query` -> value vectors promoting it, and the index's build progress

The value index is never built at server start: the first search starts it as one job of the
model's job table (lit_app/model/value_index.py; it reads weights only, no forward pass); each layer
is built as a slice of the model scheduler at the user-job level of the searching client, so clicks
and traces go first; searches answer from the layers built so far and carry the build's job status
(`index`), so the UI polls until the index is complete. The payloads are documented in
docs/architecture.md ("Inside the model").

Over 400 lines for a reason: the three wrappers are one capability and share `InsideState`,
`Located` and the intervention parser; split per wrapper, each file would import the others'.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import threading
import time
from typing import Any

from lit_nlp.api import types as lit_types

import sequence_salience as ss
from sequence_salience import inside as ssi
from sequence_salience.inside.trace import sequence_ids
from lit_app.schema import fields
from lit_app.model import jobs, user_jobs
from lit_app.errors import RequestError
from lit_app.schema.inputs import JsonDict, choice_field, int_field, text_field
from lit_app.edge.request_body import json_text
from lit_app.model.scheduler import Priority
from lit_app.model.shared_model import SharedLM
from lit_app.wrappers.wrapper import Wrapper

logger = logging.getLogger(__name__)

# Input fields (besides prompt, system, chat, target of fields.py).
INSIDE_T = "inside_t"  # Integer: which target token to trace (0-based)
INTERVENTIONS = "interventions"  # TextSegment: JSON list of {"layer", "index", "mode", "scope"}
INSIDE_ACTION = "inside_action"  # TextSegment (intervene only): "run" (default), "status", "cancel"
QUERY = "query"  # TextSegment: the word to search value vectors for
LIMIT = "limit"  # Integer: most hits returned
RANKING = "ranking"  # TextSegment: "top_k" (default: token in the value's top-k, from the index) or "projection"
# Output fields.
TRACE = "inside_trace"
INTERVENTION = "inside_intervention"
SEARCH = "inside_search"

MAX_INTERVENTIONS = 64
DEFAULT_LIMIT = 30
MAX_LIMIT = 500
TRACE_CONFIG = ssi.TraceConfig(top_k=10, top_sub_updates=10, value_top_tokens=8)
RUN_ACTIONS = ("run", "status", "cancel")
RUN_STEPS = ssi.interventions.STEPS  # ("trace", "generate", "salience"), in this order
TOP_SALIENT = 8
TRACE_CACHE_SIZE = 32  # plain traces kept for the "before" side of a run


def model_names(name: str) -> tuple[str, str, str]:
    """(trace, intervene, search) model names for the model group `name`."""
    return f"_{name}_inside_trace", f"_{name}_inside_intervene", f"_{name}_inside_search"


_TARGET_INPUTS: lit_types.Spec = {
    fields.PROMPT: lit_types.TextSegment(),
    fields.SYSTEM: lit_types.TextSegment(required=False, default=""),
    fields.CHAT: lit_types.Boolean(required=False, default=True),
    fields.TARGET: lit_types.TextSegment(required=False, default=""),
    INSIDE_T: lit_types.Integer(required=False, default=0, min_val=0, max_val=100_000),
    INTERVENTIONS: lit_types.TextSegment(required=False, default=""),
}


def parse_interventions(value: Any) -> list[ssi.Intervention]:
    """The `interventions` field: "" / None -> [], else a JSON list of {"layer", "index", "mode", "scope"}
    (mode "off" / "on" / "on_layer_max", scope "all" / "position"; see sequence_salience.inside.interventions)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, str):
        value = json_text(value, lambda e: RequestError(
            f'Input field "{INTERVENTIONS}" is not JSON ({e.msg}). Fix: send e.g. '
            '[{"layer": 20, "index": 512, "mode": "off"}].'))
    if not isinstance(value, list):
        raise RequestError(f'Input field "{INTERVENTIONS}" must be a JSON list, got {type(value).__name__}.')
    if len(value) > MAX_INTERVENTIONS:
        raise RequestError(f"{len(value)} interventions; at most {MAX_INTERVENTIONS} per request.")
    return [ssi.Intervention.parse(v) for v in value]


class InsideState:
    """What the three wrappers share besides SharedLM: the architecture and the value index (built as a job)."""

    def __init__(self, shared: SharedLM, index_top_k: int = ssi.value_index.DEFAULT_TOP_K):
        self.shared = shared
        # A job of the model's job table (only a person's search starts it; the module shows its progress):
        # each layer is one user-job slice of the shared scheduler, so clicks go first, matrix jobs wait.
        self.index = shared.value_index(index_top_k)
        self._traces: collections.OrderedDict[tuple, ssi.Trace] = collections.OrderedDict()
        self._traces_lock = threading.Lock()

    def remember_trace(self, at: "Located", tr: ssi.Trace) -> None:
        """Keeps a plain (un-intervened) trace: the "before" side of a later run on the same token."""
        with self._traces_lock:
            self._traces[at.key] = tr
            self._traces.move_to_end(at.key)
            while len(self._traces) > TRACE_CACHE_SIZE:
                self._traces.popitem(last=False)

    def cached_trace(self, at: "Located") -> ssi.Trace | None:
        with self._traces_lock:
            return self._traces.get(at.key)

    @property
    def arch(self) -> ssi.Architecture:
        """Resolved on first use, so an unsupported model fails its inside requests, not server start."""
        return self.shared.architecture()

    def explained(self, chat: Any, target: str) -> Any:
        """The response the salience module explains: the typed target, else the (cached) greedy generation."""
        if target:
            return target
        gen = self.shared.generate(chat)
        if not gen.ids:
            raise RequestError("The model generated an empty response, so there is no token to trace."
                               " Fix: type a target text, or change the prompt.")
        return gen

    def locate(self, ex: JsonDict) -> "Located":
        """Where the response's token `inside_t` sits in prompt + response."""
        chat = self.shared.format_prompt(ex)
        response = self.explained(chat, text_field(ex, fields.TARGET))
        with self.shared.model() as lm:
            ids, n_prompt = sequence_ids(lm, chat, response)
        n_targets = len(ids) - n_prompt
        t = int_field(ex, INSIDE_T, 0, 0, 100_000)
        if t >= n_targets:
            raise RequestError(f'Input field "{INSIDE_T}" is {t} but the response has {n_targets} token(s); '
                               f"use 0..{n_targets - 1}.")
        return Located(chat, response, ids, t, n_targets, n_prompt + t - 1, ids[n_prompt + t])


@dataclasses.dataclass(frozen=True)
class Located:
    """A traced token: the prompt, the response, their ids, and token t of the response (at position P + t)."""

    chat: Any
    response: Any
    ids: list[int]
    t: int
    n_targets: int
    position: int  # the position that predicts token t
    target_id: int

    @property
    def key(self) -> tuple:
        return (tuple(self.ids), self.position, self.target_id)

    def library(self) -> ssi.Located:
        """The library's view of the same token."""
        return ssi.Located(tuple(self.ids), self.position + 1 - self.t, self.t, self.position, self.target_id)


def _trace_payload(tr: ssi.Trace, t: int, n_targets: int) -> JsonDict:
    d = tr.as_dict()
    d.update(t=t, n_targets=n_targets)
    return d


class InsideWrapper(Wrapper):
    """A wrapper of "Inside the model": the shared model plus the shared `InsideState`."""

    def __init__(self, shared: SharedLM, state: InsideState):
        super().__init__(shared)
        self.state = state


class InsideTraceModel(InsideWrapper):
    """Prompt + response + token index -> the layer-by-layer trace of that token (one forward pass)."""

    INPUT_SPEC = _TARGET_INPUTS
    OUTPUT_SPEC = {TRACE: fields.JsonDict()}

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        with self.shared.model():  # interactive, held from locating the token to the trace: no slice in between
            return self._trace(ex)

    def _trace(self, ex: JsonDict) -> JsonDict:
        at = self.state.locate(ex)
        interventions = parse_interventions(ex.get(INTERVENTIONS))
        with self.shared.model() as lm:
            arch = self.state.arch
            with ssi.apply_interventions(lm, interventions, arch, at.library()):
                tr = ssi.trace_ids(lm, at.ids, at.position, at.target_id, TRACE_CONFIG, arch,
                                   index=self.state.index.snapshot())  # top tokens from the index once built
        if not interventions:
            self.state.remember_trace(at, tr)
        logger.info("inside trace: t=%d position=%d %.2f s", at.t, at.position, tr.seconds)
        return {TRACE: _trace_payload(tr, at.t, at.n_targets)}


def _side_payload(tr: ssi.Trace, at: Located, gen: ss.Generation, sal: ssi.ResponseSalience,
                  seconds: float | None) -> JsonDict:
    """One side of the comparison as the module reads it (the salience array stays on the server).

    seconds: the time to regenerate and explain it (None for the "before" side, which comes from caches).
    """
    return {"trace": _trace_payload(tr, at.t, at.n_targets), "seconds": seconds,
            "generation": {"text": gen.text, "stopped_by": gen.stopped_by},
            "n_prompt_tokens": sal.n_prompt_tokens, "salience_method": fields.GRAD_X_INPUT_METHOD,
            "top_salient": [[i, tok, v] for i, tok, v in sal.top_salient],
            "salience_total": None if sal.salience is None else float(abs(sal.salience).sum())}


class InsideInterveneModel(InsideTraceModel):
    """... + interventions -> before vs. under the interventions, in steps (see the module docstring).

    `inside_action` "run" (default) runs the job and answers with the whole comparison when it ends;
    meanwhile "status" answers at once with the job's step, progress and results so far (`partial`,
    the same payload with what is not computed yet missing), and "cancel" stops it between steps or
    between generated tokens. The "before" side reuses what the server has: the plain trace of the
    trace wrapper, the cached greedy generation, the cached salience of the whole response.
    """

    def __init__(self, shared: SharedLM, state: InsideState):
        super().__init__(shared, state)
        self.jobs = user_jobs.JobSlot(shared.jobs, "intervene")

    INPUT_SPEC = {**_TARGET_INPUTS, INSIDE_ACTION: lit_types.TextSegment(required=False, default="run")}
    OUTPUT_SPEC = {INTERVENTION: fields.JsonDict()}

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        action = choice_field(ex, INSIDE_ACTION, RUN_ACTIONS, "run")
        answer = self.jobs.poll_answer(action)
        if answer is not None:  # "status" or "cancel": never waits for the model
            return {INTERVENTION: answer}
        at = self.state.locate(ex)
        interventions = parse_interventions(ex.get(INTERVENTIONS))
        if not interventions:
            raise RequestError("No interventions to run. Fix: click a sub-update (or a search hit) to add it.")
        ivs = ssi.interventions.validate(interventions, self.state.arch)
        job = self.jobs.start("run", f"t{at.t}:{hash((at.key, ivs)) & 0xffffffff:x}")
        start = time.perf_counter()

        def ended(outcome: str) -> None:  # written while "status" still finds the job (JobSlot.running)
            logger.info("inside intervene: %d intervention(s), %s at %s %d/%d in %.1f s", len(ivs), outcome,
                        job.stage, job.done, job.total, time.perf_counter() - start)

        try:
            with self.jobs.running(job, ended):
                payload = self._run(at, ivs, job)
        except ss.ComputationCancelled:
            payload = {"cancelled": True, "reason": job.cancel_reason, "partial": job.partial}
        payload.update(action="run", seconds=round(time.perf_counter() - start, 3))
        return {INTERVENTION: payload}

    def _run(self, at: Located, ivs: tuple, job: jobs.Job) -> JsonDict:
        """The three steps (RUN_STEPS), each published in the job's status as it goes; the whole comparison."""
        run = _InterventionRun.start(at, ivs, job)
        traces = self._trace_step(run)
        gens, gen_seconds = self._generate_step(run)
        self._salience_step(run, traces, gens, gen_seconds)
        return run.payload

    def _trace_step(self, run: _InterventionRun) -> tuple[ssi.Trace, ssi.Trace]:
        """1. The probabilities and ranks: one traced forward under the interventions (before: the plain trace, cached
        by the trace wrapper when it ran); resolves the interventions ("on" constants, "position" scope) into `run`."""
        shared, arch, at = self.shared, self.state.arch, run.at
        lib_at = at.library()
        run.job.report("trace", 0, 1)
        run.publish(0, "running")
        t0 = time.perf_counter()
        before_tr = self.state.cached_trace(at)
        with shared.model(Priority.USER_JOB) as lm:  # a person started it: before automatic matrix jobs, after clicks
            run.check()
            run.ivs = ssi.resolve(lm, lib_at, run.ivs, arch)  # "on" constants (one plain forward), "position" scope
            run.payload["interventions"] = [dataclasses.asdict(iv) for iv in run.ivs]
            reused = before_tr is not None
            if before_tr is None:
                before_tr = ssi.intervened_trace(lm, lib_at, (), TRACE_CONFIG, arch, index=self.state.index.snapshot())
                self.state.remember_trace(at, before_tr)
            after_tr = ssi.intervened_trace(lm, lib_at, run.ivs, TRACE_CONFIG, arch,
                                            index=self.state.index.snapshot())
        run.payload["before"]["trace"] = _trace_payload(before_tr, at.t, at.n_targets)
        run.payload["after"]["trace"] = _trace_payload(after_tr, at.t, at.n_targets)
        run.job.report("trace", 1, 1)
        run.publish(0, "done", "cached" if reused else "computed", time.perf_counter() - t0)
        run.check()
        return before_tr, after_tr

    def _generate_step(self, run: _InterventionRun) -> tuple[tuple[ss.Generation, ss.Generation], float]:
        """2. The regenerated response, published token by token (before: the salience module's greedy response,
        cached); the two generations and the seconds the new one took."""
        shared, at, payload = self.shared, run.at, run.payload
        config = shared.generation_config_for(at.chat)  # the row's budget, as the salience module's response
        n = config.max_new_tokens
        run.job.report("generate", 0, n)
        run.publish(1, "running")
        t0 = time.perf_counter()
        reused = shared.cached_generation(at.chat) is not None
        before_gen = shared.generate(at.chat)  # the greedy response: the salience module's, cached
        payload["before"]["generation"] = {"text": before_gen.text, "stopped_by": before_gen.stopped_by}
        run.publish(1, "running", "cached" if reused else "computed")

        def on_token(ids: tuple[int, ...]) -> None:  # called while the generation holds the model
            payload["after"]["generation"] = {"text": lm.tokenizer.decode(list(ids)), "stopped_by": None}
            run.job.report("generate", len(ids), n)
            run.publish(1, "running")

        # Between tokens the hooks come off and waiting requests (a click) get the plain model.
        with shared.model(Priority.USER_JOB) as lm:
            after_gen = ssi.intervened_generation(lm, at.chat, run.ivs, config, self.state.arch, on_token=on_token,
                                                  cancel=run.job.should_stop, between_tokens=shared.yield_to_waiting)
        payload["after"]["generation"] = {"text": after_gen.text, "stopped_by": after_gen.stopped_by}
        gen_seconds = time.perf_counter() - t0
        run.job.report("generate", n, n)
        run.publish(1, "done", seconds=gen_seconds)
        run.check()
        return (before_gen, after_gen), gen_seconds

    def _salience_step(self, run: _InterventionRun, traces: tuple[ssi.Trace, ssi.Trace],
                       gens: tuple[ss.Generation, ss.Generation], gen_seconds: float) -> None:
        """3. The salience of each whole response (before: from the salience module's cache when it is there), and
        both sides of the comparison in `run.payload`."""
        shared, at = self.shared, run.at
        (before_tr, after_tr), (before_gen, after_gen) = traces, gens
        run.job.report("salience", 0, 2)
        run.publish(2, "running")
        t0 = time.perf_counter()
        method = fields.GRAD_X_INPUT_METHOD
        # The whole-response span the salience module computed for its first highlight (any IG /
        # SmoothGrad counts), else one forward + backward for this one method.
        values = shared.cached_span(at.chat, "", method) if before_gen.ids else None
        reused = values is not None
        with shared.model(Priority.USER_JOB) as lm:  # the model's tokenizer is used only under the model lock
            run.check()
            before_sal = ssi.response_salience(lm, at.chat, before_gen, method, TOP_SALIENT, values=values)
        run.job.report("salience", 1, 2)
        run.check()
        with shared.model(Priority.USER_JOB) as lm:
            after_sal = ssi.response_salience(lm, at.chat, after_gen, method, TOP_SALIENT, run.ivs, self.state.arch)
        seconds = time.perf_counter() - t0
        run.payload["before"] = _side_payload(before_tr, at, before_gen, before_sal, None)
        run.payload["after"] = _side_payload(after_tr, at, after_gen, after_sal, gen_seconds + seconds)
        run.job.report("salience", 2, 2)
        run.publish(2, "done", "cached" if reused else "computed", seconds)


@dataclasses.dataclass
class _InterventionRun:
    """What the three steps of one intervention run share: the datapoint, the interventions (resolved by the first
    step), the job whose status carries the payload so far (`partial`), and that payload."""

    at: Located
    ivs: tuple
    job: jobs.Job
    payload: JsonDict
    steps: list[JsonDict]

    @classmethod
    def start(cls, at: Located, ivs: tuple, job: jobs.Job) -> _InterventionRun:
        steps = [{"name": name, "state": "pending", "seconds": None, "before": None} for name in RUN_STEPS]
        payload: JsonDict = {"interventions": [dataclasses.asdict(iv) for iv in ivs], "steps": steps,
                             "before": {}, "after": {}}
        return cls(at, ivs, job, payload, steps)

    def publish(self, k: int, state: str, before: str | None = None, seconds: float | None = None) -> None:
        """Step `k`'s state (and whether its "before" side was cached or computed, its seconds) in the job's status."""
        self.steps[k] = {**self.steps[k], "state": state, **({"before": before} if before else {}),
                         **({"seconds": round(seconds, 3)} if seconds is not None else {})}
        self.job.partial = json.loads(json.dumps(self.payload))  # a copy: polls never see a half-built state

    def check(self) -> None:
        if self.job.should_stop():
            raise ss.ComputationCancelled("intervention run cancelled")


class InsideSearchModel(InsideWrapper):
    """A word -> the value vectors whose vocabulary projection ranks it highest, and the index's progress."""

    INPUT_SPEC = {
        QUERY: lit_types.TextSegment(),
        LIMIT: lit_types.Integer(required=False, default=DEFAULT_LIMIT, min_val=1, max_val=MAX_LIMIT),
        RANKING: lit_types.TextSegment(required=False, default="top_k"),
    }
    OUTPUT_SPEC = {SEARCH: fields.JsonDict()}

    def _predict_one(self, ex: JsonDict) -> JsonDict:
        query = text_field(ex, QUERY, required=True)
        limit = int_field(ex, LIMIT, DEFAULT_LIMIT, 1, MAX_LIMIT)
        if not query.strip():
            raise RequestError("The search text is empty. Fix: type a word, e.g. Paris.")
        ranking = choice_field(ex, RANKING, ssi.value_index.RANKINGS, "top_k")
        _ = self.state.arch  # an unsupported model fails here, with the module it lacks
        status = self.state.index.start().snapshot()  # marks the build as still wanted by this client
        if ranking == "projection":  # every value by (E v)[token]: no index needed
            with self.shared.model() as lm:
                result = ssi.search_by_projection(lm, query, limit, self.state.arch).as_dict()
            result["index"] = status.to_json()
            return {SEARCH: result}
        if status.state == jobs.ERROR:
            raise RequestError(f"The value index could not be built: {status.error}")
        snapshot = self.state.index.snapshot()
        if snapshot is None:
            with self.shared.model() as lm:
                tokens = ssi.value_index.query_tokens(lm.tokenizer, query)
            result = {"query": query, "tokens": [list(x) for x in tokens], "hits": [], "total": 0,
                      "layers_searched": 0, "num_layers": self.state.arch.num_layers}
        else:
            with self.shared.model() as lm:
                result = ssi.search_values(lm, snapshot, query, limit).as_dict()
        result["index"] = status.to_json()
        return {SEARCH: result}


def make_inside_models(shared: SharedLM, name: str) -> dict[str, Any]:
    """The three hidden LIT models of "Inside the model" for the model group `name`."""
    state = InsideState(shared)
    trace_name, intervene_name, search_name = model_names(name)
    return {
        trace_name: InsideTraceModel(shared, state),
        intervene_name: InsideInterveneModel(shared, state),
        search_name: InsideSearchModel(shared, state),
    }
