/**
 * The request and response field names the modules send and read, declared once (the server's are
 * lit_app/schema/fields.py and the wrappers' modules; tests/unit/test_frontend_field_names.py checks every
 * `*_FIELD` here is one the server declares). A module's own single field stays beside its payload
 * (`EXPLAIN_FIELD`, `SEGMENTS_FIELD`, LIT's prompt-debugging names in salience/lit_convention.ts,
 * `METHOD_REGISTRY_FIELD` in methods.ts).
 */

// The generation model and its salience companion (lit_app/schema/fields.py).
export const SALIENCE_FIELD = 'salience';
export const RESPONSE_FIELD = 'response';
export const SPAN_SALIENCE_FIELD = 'span_salience';
export const TARGET_SPAN_FIELD = 'target_span';
export const DETAIL_FIELD = 'detail';
/** With detail "span_cancel": the id of the span job to stop (its span_progress status's `job_id`). */
export const SPAN_JOB_FIELD = 'span_job';
/** With detail "matrix_cancel": the id of the per-token matrix job to stop (lit_app/wrappers/salience.py). */
export const MATRIX_JOB_FIELD = 'matrix_job';
/** With detail "stream": the response tokens shown; the server answers once there are more (a long poll). */
export const STREAM_AFTER_FIELD = 'stream_after';
// A segment method's request (`detail` = the method's registry `detail`; docs/architecture.md "Segment salience").
export const SEGMENT_METHOD_FIELD = 'segment_method';
export const GRANULARITY_FIELD = 'granularity';
export const PATTERN_FIELD = 'pattern';
export const REMOVAL_FIELD = 'removal';

/** A job status while the job waits for the model (`waiting: true`): whose work holds it, the page's own client's
 * (`WAITING_OWN`: a test it started, its click) or another client's (`WAITING_OTHER`); absent otherwise
 * (lit_app/schema/fields.py WAITING_FOR). */
export const WAITING_FOR_FIELD = 'waiting_for';
export const WAITING_OWN = 'own';
export const WAITING_OTHER = 'other';
/** A running job's status while it takes turns on the model with equal work: whose, `WAITING_OTHER` (another
 * client's job) or `WAITING_OWN` (another job of this page); absent otherwise (lit_app/schema/fields.py SHARING). */
export const SHARING_FIELD = 'sharing';

/** The prompt datasets' fields (lit_app/schema/fields.py DATASET_SPEC). */
export const CASE_FIELD = 'case';
export const PROMPT_FIELD = 'prompt';
export const TARGET_FIELD = 'target';
export const SYSTEM_FIELD = 'system';

// Compare an edit (lit_app/wrappers/compare.py): the pinned datapoint's fields sent with the selected one, and the answer.
export const COMPARE_FIELD = 'compare';
export const PINNED_PROMPT_FIELD = 'pinned_prompt';
export const PINNED_SYSTEM_FIELD = 'pinned_system';
export const PINNED_TARGET_FIELD = 'pinned_target';
// A row's own response budget (a shipped row's, lit_app/data/datasets.py), sent as it is with the datapoint; the
// pinned row's goes as PINNED_MAX_NEW_TOKENS_FIELD, so its response is the one the salience module showed.
export const MAX_NEW_TOKENS_FIELD = 'max_new_tokens';
export const PINNED_MAX_NEW_TOKENS_FIELD = 'pinned_max_new_tokens';
export const OLD_ANSWER_FIELD = 'old_answer';
export const WITH_PINNED_SALIENCE_FIELD = 'with_pinned_salience';
/** Which view asks (lit_app/schema/fields.py COMPARE_VIEWS): a page's newer comparison that computes salience stops its
 * running one of the same view only, so Compare models and Compare an edit never stop each other's. */
export const COMPARE_VIEW_FIELD = 'compare_view';
export const COMPARE_VIEW_EDIT = 'edit';
export const COMPARE_VIEW_MODELS = 'models';
export type CompareView = typeof COMPARE_VIEW_EDIT | typeof COMPARE_VIEW_MODELS;

// Inside the model (lit_app/wrappers/inside.py): the three wrappers' answers and their request fields.
export const TRACE_FIELD = 'inside_trace';
export const INTERVENTION_FIELD = 'inside_intervention';
export const SEARCH_FIELD = 'inside_search';
export const INSIDE_T_FIELD = 'inside_t';
export const INTERVENTIONS_FIELD = 'interventions';
/** The intervene wrapper's job action: "run", "status" or "cancel" (lit_app/model/user_jobs.py). */
export const RUN_ACTION_FIELD = 'inside_action';
export const QUERY_FIELD = 'query';
export const LIMIT_FIELD = 'limit';
export const RANKING_FIELD = 'ranking';

// Share this view (lit_app/wrappers/share.py, model `_<name>_share`): the method shown and the faithfulness test of
// its target in, {"html": page} out.
export const SHARE_METHOD_FIELD = 'share_method';
export const FAITHFULNESS_FIELD = 'faithfulness';
export const SHARE_FIELD = 'share';
