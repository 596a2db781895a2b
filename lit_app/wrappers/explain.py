"""LIT wrapper for "Test this explanation": faithfulness curves, input reduction, token flips,
contrastive salience, IG auto-steps (sequence_salience.explain), over the shared model of
lit_app/model/shared_model.py.

One hidden LIT model per loaded model, `_<name>_explain`. Its input is the datapoint
(prompt, system, target, chat) plus `explain_action` and that action's settings; its one
output, `explain`, is a JSON object (docs/architecture.md, "Explain payload").

Actions: "curves", "reduce", "flips", "contrastive", "ig_auto" run on the model as user jobs of
the shared scheduler (lit_app/model/scheduler.py: before the automatic per-token matrix jobs; waiting clicks,
traces and first highlights go first between its batches, which are time slices of `SharedLM.slice_s`: forward batches sized by time for
curves, reduce and flips, one IG step per pass for ig_auto, one pass per continuation for contrastive); "status" and "cancel" never wait for
it. One test runs at a time: a new one cancels the one running (the user moved on), and
"cancel" stops it; "status" reports its stage and progress for the browser to poll, and its results
so far (`partial`): the curves' coarse pass (faithfulness_stages), the IG search's counts tried.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

from lit_nlp.api import types as lit_types

import sequence_salience as ss
from sequence_salience import explain as ex
from sequence_salience import field_rules
from sequence_salience import methods as core_methods
from sequence_salience.explain import faithfulness, upper_bound
from lit_app.schema import fields
from lit_app.model import jobs, user_jobs
from lit_app.errors import RequestError
from lit_app.schema.inputs import choice_field, parse_target_span, rule_field, text_field
from lit_app.wrappers.payloads import compact, method_signed
from lit_app.model.scheduler import Priority
from lit_app.model.shared_model import SharedLM
from lit_app.wrappers.wrapper import Wrapper

logger = logging.getLogger(__name__)

# Input fields (names in lit_app/schema/fields.py; the numbers' rules in sequence_salience/field_rules.py).
ACTION = fields.EXPLAIN_ACTION
GRANULARITY = fields.GRANULARITY
PATTERN = fields.PATTERN
FOIL = fields.FOIL
METHODS = fields.METHODS
STEPS = fields.CURVE_STEPS
REMOVAL = fields.REMOVAL
IG_TOLERANCE = fields.IG_TOLERANCE  # ig_auto: largest relative completeness error; the cap is fields.IG_STEPS
# Output field.
EXPLAIN = "explain"

ACTIONS = fields.EXPLAIN_ACTIONS
DEFAULT_METHODS = core_methods.DEFAULT_METHODS
MAX_STEPS = int(field_rules.CURVE_STEPS.hi)
REDUCE_MAX_SECONDS = 120.0
FLIPS_TOP_K = 8
IG_AUTO_START_STEPS = 8
IG_AUTO_MAX_STEPS = int(field_rules.IG_AUTO_MAX_STEPS.default)  # default cap (up to --max_ig_steps at the HTTP edge)
IG_AUTO_TOLERANCE = field_rules.IG_TOLERANCE.default

# The job's stage before a test's own progress (user_jobs starts at "starting"); the browser names
# each (frontend/src/explain/logic.ts STAGES), so the first seconds say what runs.
STAGE_GENERATING = "generating"  # no target: the model's greedy response (tokens / max_new_tokens)
STAGE_WAITING = "waiting"  # queued for the model behind other work
STAGE_SALIENCE = "salience"  # curves, reduce: the salience maps whose order the test follows
STAGE_GRADIENT = "gradient"  # flips: the gradient that ranks the candidate token flips
# The curves' stages whose units are forward rows of edited prompts: one stage's rate estimates the next's time left
# until it has its own (the upper bound's first report is the rows it found in the curves' memo, in no time).
ROW_STAGES = frozenset({faithfulness.COARSE_STAGE, "curves", upper_bound.STAGE})
PRE_STAGES = ("starting", STAGE_GENERATING, STAGE_WAITING)
# The first stage of each test once it holds the model (contrastive and ig_auto then report units).
FIRST_STAGES = {"curves": STAGE_SALIENCE, "reduce": STAGE_SALIENCE, "flips": STAGE_GRADIENT,
                "contrastive": "contrastive", "ig_auto": "ig_steps"}

INPUT_SPEC: lit_types.Spec = fields.TOKENIZER_INPUT_SPEC | {
    fields.TARGET_SPAN: lit_types.TextSegment(required=False, default=""),
    ACTION: lit_types.TextSegment(required=False, default="curves"),
    GRANULARITY: lit_types.TextSegment(required=False, default="sentence"),
    PATTERN: lit_types.TextSegment(required=False, default=""),
    FOIL: lit_types.TextSegment(required=False, default=""),
    METHODS: lit_types.TextSegment(required=False, default=""),
    STEPS: fields.integer_spec(field_rules.CURVE_STEPS),
    REMOVAL: lit_types.TextSegment(required=False, default="filler"),
    fields.IG_STEPS: fields.integer_spec(field_rules.IG_AUTO_MAX_STEPS),
    IG_TOLERANCE: fields.scalar_spec(field_rules.IG_TOLERANCE),
}
OUTPUT_SPEC: lit_types.Spec = {EXPLAIN: fields.JsonDict()}


def explain_model_name(name: str) -> str:
    return f"_{name}_explain"


class ExplainModel(Wrapper):
    """Datapoint + action -> the `explain` JSON (see the module docstring)."""

    def __init__(self, shared: SharedLM):
        super().__init__(shared)
        self.jobs = user_jobs.JobSlot(shared.jobs, "explain")

    INPUT_SPEC = INPUT_SPEC
    OUTPUT_SPEC = OUTPUT_SPEC

    # ----------------------------------------------------------------- jobs

    def _hooks(self, job: jobs.Job):
        shared = self._shared

        def progress(stage: str, done: int, total: int) -> None:
            job.report(stage, done, total, same_units=stage in ROW_STAGES and job.stage in ROW_STAGES)
            shared.yield_to_waiting()  # a click in the salience module need not wait for the whole test

        return progress, job.should_stop

    # -------------------------------------------------------------- predict

    def _predict_one(self, ex_: Mapping[str, Any]) -> dict:
        action = choice_field(ex_, ACTION, ACTIONS, "curves")
        answer = self.jobs.poll_answer(action)
        if answer is not None:  # "status" or "cancel": never waits for the model
            return {EXPLAIN: answer}
        chat = self._shared.format_prompt(ex_)
        target = text_field(ex_, fields.TARGET)
        job = self.jobs.start(action, f"{action}:{hash(chat.text) & 0xffffffff:x}")
        progress, cancel = self._hooks(job)
        start = time.perf_counter()

        def ended(outcome: str) -> None:  # written while "status" still finds the job (JobSlot.running)
            logger.info("explain %s: %s at %s %d/%d in %.1f s", action, outcome, job.stage, job.done, job.total,
                        time.perf_counter() - start)

        try:
            with self.jobs.running(job, ended):
                if not target:  # the tokens generated so far, read without the model lock at each poll
                    most = self._shared.generation_config_for(chat).max_new_tokens  # this row's budget
                    job.follow(STAGE_GENERATING, lambda: (self._shared.generation_stream(chat).tokens, most))
                explained = self._shared.explained(chat, target)
                job.report(STAGE_WAITING, 0, 0)
                # Before automatic matrix jobs; clicks go first between its batches.
                with self._shared.model(Priority.USER_JOB) as lm:
                    job.report(FIRST_STAGES[action], 0, 0)
                    # The curves publish their coarse pass, the IG search the counts tried so far.
                    extra = {"job": job} if action in ("curves", "ig_auto") else {}
                    out = getattr(self, f"_{action}")(lm, ex_, chat, target, explained, progress, cancel, **extra)
        except ss.ComputationCancelled:
            out = {"cancelled": True, "reason": job.cancel_reason}
        out.update(action=action, seconds=round(time.perf_counter() - start, 3))
        return {EXPLAIN: out}

    # ------------------------------------------------------------- helpers

    @staticmethod
    def _span(lm: ss.LanguageModel, ex_, explained) -> tuple[int, int]:
        """The `target_span` field's target tokens (the whole target when empty); `lm`: the model held."""
        n = len(explained.ids) if isinstance(explained, ss.Generation) else len(lm.tokenize(explained).ids)
        return parse_target_span(ex_.get(fields.TARGET_SPAN), n) or (0, n)

    @staticmethod
    def _editable(ex_, chat) -> list[tuple[int, int, str]]:
        """(start, end, field) of the prompt text that the datapoint's fields hold: the user's
        message and, when the datapoint has one, its system prompt (not a template default)."""
        out = []
        has_system = bool(text_field(ex_, fields.SYSTEM))
        for s, e, role in chat.role_spans:
            if role == "user":
                out.append((s, e, fields.PROMPT))
            elif role == "system" and has_system:
                out.append((s, e, fields.SYSTEM))
        return out

    def _granularity(self, ex_) -> tuple[str, str | None]:
        g = choice_field(ex_, GRANULARITY, ss.aggregate.GRANULARITIES, "sentence")
        pattern = text_field(ex_, PATTERN) or None
        if g == "regex" and pattern is not None:  # checked (its bounds too) before the test compiles it
            try:
                ss.aggregate.check_pattern(pattern)
            except ss.SalienceError as e:
                raise RequestError(f'Input field "{PATTERN}": {e}') from None
        return g, pattern

    @staticmethod
    def _methods(ex_, segment_methods: bool = False) -> tuple[str, ...]:
        """The `methods` field's names; segment methods (leave one out, the surrogate) only where the test
        takes them (`segment_methods`: the curves), else the error says which tests do."""
        raw = text_field(ex_, METHODS)
        names = tuple(m.strip() for m in raw.split(",") if m.strip()) or DEFAULT_METHODS
        for m in names:
            if core_methods.is_segment_method(m) and not segment_methods:
                raise RequestError(f'Input field "{METHODS}" names the segment method {m!r}, which this test does'
                                   ' not take (its values live on segments, not tokens). Fix: use it with'
                                   ' "explain_action": "curves", or pick a token method here.')
            core_methods.get_any_method(m)
        try:
            return field_rules.distinct_names(names)
        except field_rules.FieldError as e:
            raise RequestError(f'Input field "{METHODS}": {e} (a repeat is computed again).') from None

    # ------------------------------------------------------------- actions

    def _curves(self, lm: ss.LanguageModel, ex_, chat, target, explained, progress, cancel, job: jobs.Job) -> dict:
        """Coarse, then refined (ex.faithfulness_stages): the coarse pass's payload, marked
        "preliminary", becomes the job's `partial` that "status" returns; the answer is the full one."""
        granularity, pattern = self._granularity(ex_)
        steps = int(rule_field(ex_, field_rules.CURVE_STEPS))
        removal = text_field(ex_, REMOVAL) or "filler"
        cached = getattr(self._shared, "cached_salience", None)
        result = cached(chat, target) if cached is not None else None
        span = self._span(lm, ex_, explained)
        # Only the datapoint's own text is removed (as reduce and flips edit it), not the chat template's
        # default system prompt: "What is the capital of France?" has 7 word segments, not 22.
        editable = self._editable(ex_, chat)
        config = ex.FaithfulnessConfig(granularity=granularity, pattern=pattern, steps=steps, removal=removal,
                                       regions=tuple((s, e) for s, e, _ in editable) or None,
                                       slice_s=self._shared.slice_s)
        fields_tested = [name for _, _, name in editable] if editable else None

        def on_coarse(rep) -> None:
            job.partial = {**self._curves_payload(lm, rep), "fields": fields_tested, "preliminary": True,
                           "refining": {"steps": config.steps, "n_random": config.n_random,
                                        "upper_bound": config.upper_bound},
                           "seconds": round(time.monotonic() - job.started, 3)}
            job.report("curves", 0, 0, same_units=True)  # the refinement from now on (its first batch reports the rows)

        rep = ex.faithfulness_stages(
            lm, ex.CurvesRequest(chat, explained, self._methods(ex_, segment_methods=True), span=span, result=result,
                                 config=config, progress=progress, cancel=cancel), on_coarse=on_coarse)
        return {**self._curves_payload(lm, rep), "fields": fields_tested, "preliminary": False}

    def _curves_payload(self, lm: ss.LanguageModel, rep) -> dict:
        curves = {}
        for mode, by_name in rep.curves.items():
            for name, c in by_name.items():
                entry = {"logprobs": compact(c.logprobs), "aopc": float(c.aopc)}
                if c.all_logprobs is not None:
                    entry["low"] = compact(c.all_logprobs.min(0))
                    entry["high"] = compact(c.all_logprobs.max(0))
                curves.setdefault(name, {})[mode] = entry
        return {
            "span": list(rep.span), "granularity": rep.granularity, "removal": rep.removal, "steps": len(rep.n_removed) - 1,
            "filler": lm.tokenizer.decode([rep.filler_id]), "n_segments": len(rep.segments),
            "n_removed": [int(n) for n in rep.n_removed], "original_logprob": rep.original_logprob,
            "empty_logprob": rep.empty_logprob, "methods": rep.methods, "curves": curves,
            "gaps": {m: {mode: rep.gap(m, mode) for mode in rep.curves} for m in rep.methods},
            "n_random": rep.n_random, "seed": rep.seed, "n_scored": rep.n_scored,
            # Baselines, orderings and verdicts (sequence_salience.explain.faithfulness): one row per
            # (mode, method, ordering); a signed method has a "signed" and an "abs" row.
            "ranked": rep.ranked(), "noise_sigmas": ex.faithfulness.NOISE_SIGMAS,
            "table": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()} for row in rep.table()],
            # The best order the test found (its curve is curves[name]); decidable[mode] False: no order
            # beats random and length by the noise, and the methods' verdict is `undecidable`.
            "upper_bound": self._upper_bound(rep),
        }

    @staticmethod
    def _upper_bound(rep) -> dict | None:
        name = ex.faithfulness.UPPER
        if not all(name in by_name for by_name in rep.curves.values()):
            return None
        return {"name": name, "rows": rep.upper_bound_rows, "undecidable": ex.faithfulness.UNDECIDABLE,
                "search": {mode: by_name[name].ordering for mode, by_name in rep.curves.items()},
                "decidable": {mode: bool(rep.decidable(mode)) for mode in rep.curves}}

    def _reduce(self, lm: ss.LanguageModel, ex_, chat, target, explained, progress, cancel) -> dict:
        granularity, pattern = self._granularity(ex_)
        editable = self._editable(ex_, chat)
        methods = self._methods(ex_)
        removal = text_field(ex_, REMOVAL) or "delete"
        config = ex.ReductionConfig(
            method=methods[0], granularity=granularity, pattern=pattern,
            criterion="logprob" if target else "greedy", max_seconds=REDUCE_MAX_SECONDS, removal=removal,
            regions=tuple((s, e) for s, e, _ in editable), slice_s=self._shared.slice_s)
        red = ex.reduce_prompt(lm, chat, explained, span=self._span(lm, ex_, explained), config=config,
                               progress=progress, cancel=cancel)
        removed = set(red.removed)
        fields_out = {}
        for s, e, name in editable:
            pieces, pos = [], s
            for k, (a, b) in sorted(enumerate(red.segments), key=lambda kv: kv[1]):
                if a < s or b > e:
                    continue
                if a > pos:
                    pieces.append([red.prompt_text[pos:a], False])
                pieces.append([red.prompt_text[a:b], k in removed])
                pos = b
            if pos < e:
                pieces.append([red.prompt_text[pos:e], False])
            fields_out[name] = {"reduced": red.reduce_range(s, e), "pieces": pieces}
        return {
            "fields": fields_out, "criterion": red.criterion, "tolerance": red.tolerance,
            "n_segments": len(red.segments), "n_removed": len(red.removed), "stopped_by": red.stopped_by,
            "n_checks": red.n_checks, "original_logprob": red.original_logprob,
            "reduced_logprob": red.reduced_logprob, "granularity": granularity, "method": config.method,
            "removal_order": [red.segment_texts[r] for r in red.removed],
            "removal": red.removal, "filler": red.filler_text,
        }

    def _flips(self, lm: ss.LanguageModel, ex_, chat, target, explained, progress, cancel) -> dict:
        editable = self._editable(ex_, chat)
        rep = ex.token_flips(lm, chat, explained, span=self._span(lm, ex_, explained), top_k=FLIPS_TOP_K,
                             regions=[(s, e) for s, e, _ in editable], progress=progress, cancel=cancel,
                             slice_s=self._shared.slice_s)
        flips = []
        for f in rep.flips:
            field = next(((s, e, name) for s, e, name in editable if s <= f.char_span[0] and f.char_span[1] <= e), None)
            if field is None:
                continue
            s, e, name = field
            text = rep.prompt_text
            value = text[s:f.char_span[0]] + f.new_text + text[f.char_span[1]:e]
            a, b = f.char_span
            flips.append({
                "field": name, "value": value, "old": f.old_text, "new": f.new_text,
                "before": text[max(s, a - 30):a], "after": text[b:min(e, b + 30)],
                "delta": f.delta, "estimated_delta": f.estimated_delta, "logprob": f.logprob,
                "keeps_greedy": f.keeps_greedy, "retokenized": f.retokenized, "word_end": f.word_end,
            })
        return {"flips": flips, "original_logprob": rep.original_logprob,
                "original_keeps_greedy": rep.original_keeps_greedy, "span": list(rep.span),
                "n_positions": rep.n_positions, "n_verified": rep.n_verified}

    def _contrastive(self, lm: ss.LanguageModel, ex_, chat, target, explained, progress, cancel) -> dict:
        foil = text_field(ex_, FOIL)
        if not foil:
            raise RequestError(f'Input field "{FOIL}" is empty. Fix: type the alternative to contrast with.')
        # The selected target span against the foil at the same position (the whole answer when it is selected).
        res = ex.contrastive_salience(lm, chat, explained, foil, self._methods(ex_),
                                      span=self._span(lm, ex_, explained), progress=progress, cancel=cancel)
        return {
            "text": res.text, "tokens": list(res.tokens), "offsets": res.offsets.tolist(),
            "special": [bool(s) for s in res.special], "role_spans": [[int(s), int(e), r] for s, e, r in res.role_spans],
            "prompt_end": res.prompt_end, "n_prompt_tokens": res.n_prompt_tokens, "span": list(res.span),
            "target": res.target_text, "foil": res.foil_text, "target_logprob": res.target_logprob,
            "foil_logprob": res.foil_logprob,
            "methods": {m: {"signed": method_signed(m),
                            "values": compact(v)} for m, v in res.values.items()},
        }


    def _ig_auto(self, lm: ss.LanguageModel, ex_, chat, target, explained, progress, cancel, job: jobs.Job) -> dict:
        """The search's counts tried so far (and the best) become the job's `partial` after each count."""
        cap_n = int(rule_field(ex_, field_rules.IG_AUTO_MAX_STEPS))  # the most IG steps to try
        tolerance = float(rule_field(ex_, field_rules.IG_TOLERANCE))
        span = self._span(lm, ex_, explained)
        start = min(IG_AUTO_START_STEPS, cap_n)
        # One IG step per forward + backward: each is one bounded slice between which clicks go first.
        config = dataclasses.replace(self._shared.salience_config, ig_step_chunk_size=1)

        def tried_payload(tried) -> list[dict]:
            return [{"steps": t.steps, "error": t.error, "relative_error": t.relative_error,
                     "seconds": round(t.seconds, 3)} for t in tried]

        def on_tried(tried) -> None:
            best = min(tried, key=lambda t: t.relative_error)
            job.partial = {"tried": tried_payload(tried), "best_steps": best.steps,
                           "best_relative_error": best.relative_error, "tolerance": tolerance}

        q = ex.ig_auto_steps(lm, chat, explained, span=span, tolerance=tolerance, start_steps=start,
                             max_steps=cap_n, config=config, progress=progress, cancel=cancel, on_tried=on_tried)
        chosen = next(t for t in q.tried if t.steps == q.steps)
        return {
            "span": list(q.span), "steps": q.steps, "stopped_by": q.stopped_by, "converged": q.converged,
            "tolerance": q.tolerance, "relative_error": q.relative_error, "error": chosen.error,
            "delta": q.delta, "max_steps": cap_n, "schedule": ex.step_schedule(start, cap_n),
            "needed_steps": q.needed_steps, "tried": tried_payload(q.tried),
        }
