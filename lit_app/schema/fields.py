"""Field names, model names and LIT specs, declared once for the whole LIT app.

Every wrapper, dataset, layout, limit, test and benchmark imports its names from here;
the TypeScript module (frontend/) reads the same names (docs/architecture.md,
"LIT salience payload"). Method names and count fields come from the core registry
(sequence_salience.methods); the merged method list the browser reads is METHOD_REGISTRY.
A number's rule (range, default, help) is the core's (sequence_salience/field_rules.py):
`integer_spec` / `scalar_spec` make its LIT spec, lit_app/schema/inputs.py `rule_field` parses it and
lit_app/edge/limits.py checks it at the HTTP edge, all from the one declaration.
"""

from __future__ import annotations

from lit_nlp.api import types as lit_types

from sequence_salience import field_rules
from sequence_salience.field_rules import FieldRule
from sequence_salience.methods import (get_method, get_segment_method, grad_norm, grad_x_input, integrated_gradients,
                                       list_segment_methods, smooth_grad)
from lit_app.schema import method_registry

# Names of the core library's methods (sequence_salience.list_methods()), from the registry.
GRAD_NORM_METHOD = grad_norm.NAME
GRAD_X_INPUT_METHOD = grad_x_input.NAME
IG_METHOD = integrated_gradients.NAME
SMOOTH_GRAD_METHOD = smooth_grad.NAME

# ---------------------------------------------------------------------------
# Input fields (dataset rows and model inputs).
PROMPT = "prompt"  # the user's text (TextSegment)
SYSTEM = "system"  # optional system prompt (TextSegment, may be empty)
TARGET = "target"  # optional text to explain; empty -> greedy generation
CASE = "case"  # dataset only: name of the case study (CategoryLabel)
CHAT = "chat"  # optional Boolean: apply the tokenizer's chat template
# optional whole number, every model (not in the LIT specs): the row's own response budget, 1 to
# field_rules.MAX_NEW_TOKENS.hi, capped by the server's --max_new_tokens; absent: the default budget
# (lit_app/model/responses.py Responses.config_for). A shipped row may carry it (the chain-of-thought case's 192).
MAX_NEW_TOKENS = "max_new_tokens"
IG_STEPS = get_method(IG_METHOD).count.name  # optional Integer: 0 = no integrated gradients
SMOOTH_GRAD_SAMPLES = get_method(SMOOTH_GRAD_METHOD).count.name  # optional Integer: 0 = no SmoothGrad
TARGET_SPAN = "target_span"  # optional "t0:t1" over target tokens
# optional: "" all matrices at once | "span" | "poll" | "stream" | "span_progress" | "span_cancel" | "matrix_cancel"
# | "page_closed" (the page is going away: its client's background jobs stop) | a counted method's matrix_detail
# (progressive)
DETAIL = "detail"
# string, required with detail="span_cancel": the id of the span job to stop, as its "span_progress" status named it
# ("job_id"); a cancel naming an older job never stops a newer one.
SPAN_JOB = "span_job"
# string, required with detail="matrix_cancel": the id of the per-token matrix job (IG, SmoothGrad) to stop, as
# its status named it ("job_id"); the page sends it when the user switches away from that method or count.
MATRIX_JOB = "matrix_job"
# optional Integer with detail="stream": the response tokens the page shows; the answer then waits (a long
# poll, at most salience.STREAM_WAIT_S) until there are more or the generation is done. Absent: answer at once.
STREAM_AFTER = "stream_after"
# LIT's prompt-debugging convention (lit_app/wrappers/lit_convention.py): 0/1 per token of TOKENS, 1 on the
# span to explain; sent by LIT's built-in Sequence Salience module, never by ours.
TARGET_MASK = "target_mask"
# A segment method's request (detail=method_registry.SEGMENT_DETAIL; docs/architecture.md "Segment salience"):
SEGMENT_METHOD = "segment_method"  # the segment method (methods.list_segment_methods())
GRANULARITY = "granularity"  # the segmentation its values live on (aggregate.GRANULARITIES); default "sentence"
PATTERN = "pattern"  # the regex of granularity "regex"
REMOVAL = "removal"  # how a segment is removed: "filler" (default) or "delete" (methods.base.SEGMENT_REMOVALS)
# Each counted segment method's count rule (the surrogate's "surrogate_masks"); absent: its default count.
SEGMENT_COUNT_RULES: dict[str, FieldRule] = {name: get_segment_method(name).count for name in list_segment_methods()
                                             if get_segment_method(name).count}
SEGMENT_COUNT_FIELDS = {name: rule.name for name, rule in SEGMENT_COUNT_RULES.items()}
# The explain model's inputs (lit_app/wrappers/explain.py; besides PROMPT, SYSTEM, TARGET, CHAT, TARGET_SPAN,
# GRANULARITY, PATTERN, REMOVAL, IG_STEPS: for "ig_auto" the most steps tried, field_rules.IG_AUTO_MAX_STEPS).
EXPLAIN_ACTION = "explain_action"  # one of EXPLAIN_ACTIONS; absent: "curves"
EXPLAIN_ACTIONS = ("curves", "reduce", "flips", "contrastive", "ig_auto", "status", "cancel")
FOIL = "foil"  # contrastive: the alternative target
METHODS = "methods"  # comma-separated method names (segment methods: only for "curves")
CURVE_STEPS = field_rules.CURVE_STEPS.name  # curves: points after the start
IG_TOLERANCE = field_rules.IG_TOLERANCE.name  # ig_auto: largest relative completeness error

# ---------------------------------------------------------------------------
# Output fields.
RESPONSE = "response"  # GeneratedText: the generated or explained target
RESPONSE_TOKENS = "response_tokens"  # Tokens of the response
TOKENS = "tokens"  # Tokens: all N tokens of prompt (+ target)
SALIENCE = "salience"  # the JSON payload of docs/architecture.md
SPAN_SALIENCE = "span_salience"  # {method: [N floats]} for TARGET_SPAN, or {}
# The key of a segment method's values inside the SALIENCE payload (lit_app/wrappers/payloads.py segment_payload).
SEGMENTS = "segments"
# Beside a running segment job's progress: its values so far, in SEGMENTS' form (attention_verified's estimate, then
# the map with the segments verified so far; lit_app/wrappers/salience.py `_segments`).
PARTIAL_SEGMENTS = "partial_segments"
# The answer of a method_registry.SEGMENT_KNOWN_DETAIL request: {"method": the exact method whose values the request's
# method would take (salience_runs.py `exact_values_of`), "measured": how many of the segments it measured}, or None.
KNOWN_EXACT = "known_exact"
# TokenScores over TOKENS for a TARGET_MASK request (else None): LIT's prompt-debugging field names,
# which LIT's built-in Sequence Salience module lists as its methods (lit_app/wrappers/lit_convention.py).
GRAD_L2 = "grad_l2"  # grad_norm of the masked span
GRAD_DOT_INPUT = "grad_dot_input"  # grad_x_input of the masked span
GRAD_L2_MAP = "grad_l2_map"  # SequenceSalienceMap [T, N] of grad_norm (complete requests), else None
GRAD_DOT_INPUT_MAP = "grad_dot_input_map"  # SequenceSalienceMap of grad_x_input
# A job status (lit_app/model/jobs_status.py, detail form) while the job waits for the model ("waiting": true): whose
# work holds it, WAITING_OWN (its own client's: a test it started, its click) or WAITING_OTHER (another client's);
# absent otherwise. The page words it (frontend/src/shared/fields.ts, salience/payload.ts `timeLeft`).
WAITING_FOR = "waiting_for"
WAITING_OWN = "own"
WAITING_OTHER = "other"
# A running job's status while it takes turns on the model with equal work (lit_app/model/jobs.py `Job.share`):
# whose, WAITING_OTHER (another client's job) or WAITING_OWN (another job of its own client); absent otherwise. Its
# estimate then counts the turns it leaves to that work. The page words it (salience/payload.ts `timeLeft`).
SHARING = "sharing"
# Spec only (never in an output): the method list the browser reads (method_registry.published_registry()),
# as the `default` of the salience model's output field.
METHOD_REGISTRY = "method_registry"
# Compare an edit (lit_app/wrappers/compare.py): the pinned datapoint's fields sent with the selected one, and the
# JSON output (the pinned response's log-probs under both prompts).
PINNED_PROMPT = "pinned_prompt"
PINNED_SYSTEM = "pinned_system"
PINNED_TARGET = "pinned_target"
PINNED_MAX_NEW_TOKENS = "pinned_max_new_tokens"  # the pinned row's own MAX_NEW_TOKENS (absent: none)
OLD_ANSWER = "old_answer"  # Boolean: also explain the pinned answer under the selected prompt
WITH_PINNED_SALIENCE = "with_pinned_salience"  # Boolean: also send the pinned datapoint's salience
# Which view sent a comparison: a client's newer comparison that computes salience supersedes its running one of the
# same view only (Compare models beside Compare an edit). Absent: COMPARE_VIEW_EDIT (old clients, notebooks).
COMPARE_VIEW = "compare_view"
COMPARE_VIEW_EDIT = "edit"  # Compare an edit: the pinned datapoint against the selected one
COMPARE_VIEW_MODELS = "models"  # Compare models: each model's salience of the selected datapoint "pinned" to itself
COMPARE_VIEWS = (COMPARE_VIEW_EDIT, COMPARE_VIEW_MODELS)
COMPARE = "compare"

# "Share this view" (lit_app/wrappers/share.py): the method shown (with GRANULARITY, PATTERN, TARGET_SPAN, the extra
# methods' counts; a segment method's REMOVAL and count) and the faithfulness test's curves payload of the target shown
# (FAITHFULNESS, optional) in; the standalone page (sequence_salience/display/share.py) out, as {"html": ...}.
SHARE_METHOD = "share_method"
FAITHFULNESS = "faithfulness"
SHARE = "share"


# ---------------------------------------------------------------------------
# Model names. LIT's convention (also used by its own prompt-debugging demo):
# the generation model is the visible one; the salience and tokenizer models
# share its weights and start with "_" so that LIT's model selector hides them.
# LIT selects the *first* model of the map by default, so the generation
# model must come first.
def model_group_names(name: str) -> tuple[str, str, str]:
    """Returns (generation, salience, tokenizer) model names for `name`."""
    return name, f"_{name}_salience", f"_{name}_tokenizer"


def compare_model_name(name: str) -> str:
    """The compare wrapper of generation model `name` (lit_app/wrappers/compare.py; the browser derives it alike)."""
    return f"_{name}_compare"


def share_model_name(name: str) -> str:
    """The "share this view" wrapper of generation model `name` (lit_app/wrappers/share.py; the browser derives it alike)."""
    return f"_{name}_share"


# ---------------------------------------------------------------------------
# Specs.
#
# lit-nlp 1.3.1 has no JsonDict LitType, and LIT's client refuses specs whose
# type name it does not know ("Attempted to revive an unknown LitType"), so
# free-form JSON outputs are declared with the base LitType, which the client
# knows and which no built-in module tries to render.
JsonDict = lit_types.LitType


def integer_spec(rule: FieldRule, off: bool = False) -> lit_types.Integer:
    """The LIT spec of a whole-number rule; `off`: 0 (the default) switches a counted method off."""
    return lit_types.Integer(required=False, default=0 if off else rule.default, min_val=0 if off else rule.lo,
                             max_val=rule.hi)


def scalar_spec(rule: FieldRule) -> lit_types.Scalar:
    """The LIT spec of a number rule."""
    return lit_types.Scalar(required=False, default=rule.default, min_val=rule.lo, max_val=rule.hi)


# Column order of LIT's data table and editor: the case study's name first.
# In the order of LIT's data table columns: the case, the prompt, the typed target (what a row
# explains), then the (long) system prompt, so that the narrow left column shows what matters.
DATASET_SPEC: lit_types.Spec = {
    CASE: lit_types.CategoryLabel(required=False, default=""),
    PROMPT: lit_types.TextSegment(),
    TARGET: lit_types.TextSegment(required=False, default=""),
    SYSTEM: lit_types.TextSegment(required=False, default=""),
}

_PROMPT_INPUTS: lit_types.Spec = {
    PROMPT: lit_types.TextSegment(),
    SYSTEM: lit_types.TextSegment(required=False, default=""),
    CHAT: lit_types.Boolean(required=False, default=True),
}

GENERATION_INPUT_SPEC: lit_types.Spec = dict(_PROMPT_INPUTS)

TOKENIZER_INPUT_SPEC: lit_types.Spec = _PROMPT_INPUTS | {
    TARGET: lit_types.TextSegment(required=False, default=""),
}

# A segment method's settings (inputs.segment_request): the salience model's `detail="segments"` requests,
# and the compare model's, which measures both prompts with the segment method on screen.
_SEGMENT_INPUTS: lit_types.Spec = {
    SEGMENT_METHOD: lit_types.TextSegment(required=False, default=""),
    GRANULARITY: lit_types.TextSegment(required=False, default="sentence"),
    PATTERN: lit_types.TextSegment(required=False, default=""),
    REMOVAL: lit_types.TextSegment(required=False, default="filler"),
    **{rule.name: integer_spec(rule) for rule in SEGMENT_COUNT_RULES.values()},
}

SALIENCE_INPUT_SPEC: lit_types.Spec = TOKENIZER_INPUT_SPEC | {
    # ig_steps, smooth_grad_samples: 0 = off (method_registry.EXTRA_METHODS)
    **{e.field: integer_spec(e.rule, off=True) for e in method_registry.EXTRA_METHODS},
    TARGET_SPAN: lit_types.TextSegment(required=False, default=""),
    DETAIL: lit_types.TextSegment(required=False, default=""),
    SPAN_JOB: lit_types.TextSegment(required=False, default=""),
    MATRIX_JOB: lit_types.TextSegment(required=False, default=""),
    STREAM_AFTER: lit_types.Integer(required=False, default=-1, min_val=-1, max_val=1_000_000),
    TARGET_MASK: lit_types.TokenScores(align="", required=False),
    **_SEGMENT_INPUTS,
}

GENERATION_OUTPUT_SPEC: lit_types.Spec = {
    RESPONSE: lit_types.GeneratedText(parent=TARGET),
    RESPONSE_TOKENS: lit_types.Tokens(parent=RESPONSE),
}

TOKENIZER_OUTPUT_SPEC: lit_types.Spec = {
    TOKENS: lit_types.Tokens(parent=PROMPT),
}

SALIENCE_OUTPUT_SPEC: lit_types.Spec = {
    RESPONSE: lit_types.GeneratedText(parent=TARGET),
    TOKENS: lit_types.Tokens(parent=PROMPT),
    SALIENCE: JsonDict(),
    SPAN_SALIENCE: JsonDict(required=False),
    GRAD_L2: lit_types.TokenScores(align=TOKENS, required=False),
    GRAD_DOT_INPUT: lit_types.TokenScores(align=TOKENS, required=False),
    GRAD_L2_MAP: lit_types.SequenceSalience(signed=False, required=False),
    GRAD_DOT_INPUT_MAP: lit_types.SequenceSalience(signed=True, required=False),
    # LIT 1.3.1's base LitType has `default` only as a class attribute (its to_json leaves it out);
    # ListLitType has it as a field, and LIT's client and Python both revive it with its value.
    METHOD_REGISTRY: lit_types.ListLitType(required=False, default=method_registry.published_registry()),
}

COMPARE_INPUT_SPEC: lit_types.Spec = _PROMPT_INPUTS | {
    # the extra method shown (its count > 0): the pinned side's salience includes it
    **{e.field: integer_spec(e.rule, off=True) for e in method_registry.EXTRA_METHODS},
    PINNED_PROMPT: lit_types.TextSegment(required=False, default=""),
    PINNED_SYSTEM: lit_types.TextSegment(required=False, default=""),
    PINNED_TARGET: lit_types.TextSegment(required=False, default=""),
    OLD_ANSWER: lit_types.Boolean(required=False, default=False),
    WITH_PINNED_SALIENCE: lit_types.Boolean(required=False, default=False),
    COMPARE_VIEW: lit_types.TextSegment(required=False, default=COMPARE_VIEW_EDIT),  # one of COMPARE_VIEWS
    # a segment method on screen (with_pinned_salience): both prompts' values at its segmentation
    **_SEGMENT_INPUTS,
}

COMPARE_OUTPUT_SPEC: lit_types.Spec = {COMPARE: JsonDict()}

SHARE_INPUT_SPEC: lit_types.Spec = TOKENIZER_INPUT_SPEC | {
    **{e.field: integer_spec(e.rule, off=True) for e in method_registry.EXTRA_METHODS},
    # a segment method shown: its removal and count (its name is SHARE_METHOD's)
    **{k: v for k, v in _SEGMENT_INPUTS.items() if k != SEGMENT_METHOD},
    SHARE_METHOD: lit_types.TextSegment(required=False, default=""),
    GRANULARITY: lit_types.TextSegment(required=False, default="word"),
    PATTERN: lit_types.TextSegment(required=False, default=""),
    TARGET_SPAN: lit_types.TextSegment(required=False, default=""),
    FAITHFULNESS: JsonDict(required=False),
}

SHARE_OUTPUT_SPEC: lit_types.Spec = {SHARE: JsonDict()}
