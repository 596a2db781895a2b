"""Faithfulness curves: does removing the most salient prompt segments hurt the target most?

For a target span and each salience method, rank the prompt's segments (at any
granularity) by their salience for log p(target span), then

* deletion: remove the top n_k segments, k = 0..K, and record log p(target span);
* insertion: start from the prompt with every removable segment removed and reveal
  the top n_k segments;

with n_k = round(k * S / K) of the S removable segments (K = min(steps, S)).

Baselines a faithful map must beat:
* "random": `n_random` (default 10) seeded random orders; the reference curve is their mean and
  their spread (the standard deviation of the R random orders' AOPCs) is the noise level;
* "length": the longest segments first (most prompt tokens; ties: more characters, then the
  earlier segment), which explains much of a map's lead when long segments matter most.

Orderings: an unsigned method (grad_norm) ranks by its value ("value"). A signed method
(grad_x_input, integrated_gradients, ...) is ranked both ways: "signed" (most positive first,
the key `method`) and "abs" (largest |value| first, the key `method + ABS_SUFFIX`); every curve
and table row names the ordering it used.

Upper bound ("upper_bound", `upper_bound=True` by default): the best order the test can find on
its own metric (upper_bound.py: an exact search over every subset when S <= 6, 2^S forward rows
shared by both modes; a greedy search over the curve points, at most 16 candidates per point, for
larger S; never below the best order the test scored). Its curve sits beside the baselines.

Verdict per curve and mode (`verdict`), with noise = NOISE_SIGMAS x the random orders' standard
deviation of AOPC (0 with one random order):
* "beats random and length": AOPC > random mean + noise AND AOPC > length + noise;
* "worse": AOPC < max(random mean, length) - noise (a trivial order does clearly better);
* "not decidable on this prompt": even the upper bound does not beat random and length by the
  noise (the prompt has too few segments, or too little spread between orders, for any order to
  pass): every method that is not "worse" gets it instead of "within noise";
* "within noise": otherwise.
"worse" stays "worse" on an undecidable prompt: a trivial order doing clearly better is a finding
even where no order could pass the test.

Removal (`removal=`):
* "filler" (default): every token of a removed segment is replaced by one filler token
  (default: the single token of " ", a space), so positions and the token count stay
  the same and only the content changes;
* "delete": the segment's text is deleted and the edited prompt re-tokenized (what a
  user editing the prompt would get; positions shift).

AOPC (area over the perturbation curve, Samek et al. 2017, https://arxiv.org/abs/1509.06321),
in nats, higher = more faithful:
* deletion: mean over k = 0..K of  log p(x) - log p(x with top n_k removed);
* insertion: mean over k = 0..K of  log p(x with top n_k revealed) - log p(x with all removed).
`FaithfulnessReport.gap(method, mode)` is the method's AOPC minus the random orders' mean.

All curves of all methods and both modes go through `scoring.score`: identical edited
prompts are scored once (k = 0 and k = K are shared by every curve), and the rest run in
padded batches of forward passes; no backward pass. The upper bound's search runs after them
(stage "upper_bound"), reusing every prompt they scored.

Curves are built from `orders` (name -> segment order) and `scores` (method -> segment values):
a method that gives segment values directly enters the report the same way.

Coarse, then refined (`faithfulness_stages`): for a person who waits, a first report with few
points and random orders and no upper bound (`coarse_config`; fewer on a long prompt or response, so
that its cost stays about the same), then the full one, which reuses the
first pass's segment values and scored prompts (`memo`), so the refinement scores only what the
coarse pass lacked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from sequence_salience import ablation, field_rules, scoring
from sequence_salience.errors import SalienceError
from sequence_salience.explain import upper_bound as search
from sequence_salience.methods import DEFAULT_METHODS, get_any_method, is_segment_method
from sequence_salience.methods.base import AblationConfig, SalienceConfig
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.result import SalienceResult
from sequence_salience.salience import compute_span_result, tokenized_result
from sequence_salience.scoring import Cancel, Progress
from sequence_salience.text import ChatPrompt

MODES = ("deletion", "insertion")
REMOVALS = scoring.REMOVALS
RANDOM = "random"
LENGTH = "length"
BASELINES = (RANDOM, LENGTH)
UPPER = "upper_bound"  # the curve of the best order found (upper_bound.py); not a method, not a baseline
REFERENCES = BASELINES + (UPPER,)  # every curve that is not a method's
ABS_SUFFIX = ":abs"  # the key of a signed method's |value| ordering
NOISE_SIGMAS = 2.0
# faithfulness_stages' first pass: few points, few random orders, no upper bound (coarse_config).
COARSE_STEPS = 4
COARSE_RANDOM = 3
# ... and at most about this many token positions through the model (rows x (prompt + target tokens)),
# fewer points first (down to 2), then fewer random orders (down to 1): 4 points, 3 random orders and
# 4 ranked orders are 44 rows, which a 7-word question (~50 tokens a row) stays well under, while the
# chain-of-thought row (70 prompt + 143 target tokens) would be 9,400 positions, 109 s of model time
# at load 3-5 on 2 cores (~180 positions/s measured, batches of 8 rows of 213 tokens). Its coarse pass
# is 2 points (16 rows, 3,400 positions) instead.
COARSE_MAX_TOKENS = 4_000
COARSE_MIN_STEPS = 2  # one point between the original and the empty prompt: orders can differ
COARSE_STAGE = "coarse_curves"  # its progress stage (the refinement's: "curves", then "upper_bound")
MAX_EXHAUSTIVE = 14  # 2^14 = 16,384 edited prompts
VERDICTS = ("beats random and length", "within noise", "worse", "not decidable on this prompt")
BEATS, NOISE, WORSE, UNDECIDABLE = VERDICTS


def verdict(aopc_value: float, random_mean: float, random_std: float, length_aopc: float,
            sigmas: float = NOISE_SIGMAS, bound_aopc: float | None = None) -> str:
    """One of VERDICTS (see the module docstring); bound_aopc: the upper bound's AOPC (None: no bound)."""
    noise = sigmas * random_std
    if aopc_value > random_mean + noise and aopc_value > length_aopc + noise:
        return BEATS
    if aopc_value < max(random_mean, length_aopc) - noise:
        return WORSE
    if bound_aopc is not None and not decidable(bound_aopc, random_mean, random_std, length_aopc, sigmas):
        return UNDECIDABLE
    return NOISE


def decidable(bound_aopc: float, random_mean: float, random_std: float, length_aopc: float,
              sigmas: float = NOISE_SIGMAS) -> bool:
    """Whether the best order found beats random and length by the noise (else no order can pass)."""
    noise = sigmas * random_std
    return bound_aopc > random_mean + noise and bound_aopc > length_aopc + noise


def length_order(token_counts: Sequence[int], char_counts: Sequence[int]) -> np.ndarray:
    """Segment positions, longest first: most tokens, then most characters, then the earlier segment."""
    S = len(token_counts)
    return np.array(sorted(range(S), key=lambda s: (-int(token_counts[s]), -int(char_counts[s]), s)), dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class FaithfulnessConfig:
    """Settings of faithfulness_curves.

    Attributes:
      granularity: segments to remove (aggregate.GRANULARITIES); pattern: for "regex".
      steps: K, the number of points after k = 0 (fewer when there are fewer segments).
      modes: "deletion" and/or "insertion".
      removal: "filler" (replace tokens, keep positions) or "delete" (delete the text).
      filler: the filler token, as a one-token text or a token id.
      n_random: random orders averaged for the reference (10: enough for a stable mean and spread);
        seed: their seed.
      batch_size: edited prompts per forward pass.
      regions: optional character ranges of the prompt text to which removal is limited
        (scoring.prompt_segments), e.g. the user's message.
      slice_s: None, or seconds: forward batches of about this much model time (at most
        batch_size prompts), so that a caller sharing the model can let others go between
        them (sequence_salience/slices.py); the scores do not depend on it.
      upper_bound: also search the best order on the test's own metric (upper_bound.py) and say
        "not decidable on this prompt" when even it stays within the noise. On by default: at
        sentence granularity (S <= 6: exact, at most 2^S = 64 forward rows for both modes, many
        shared with the curves) it costs about as much as the curves themselves; off saves that.
      exhaustive_max_segments: the exact search up to this many segments (2^S rows), greedy above.
      greedy_candidates: the greedy search's candidates per curve point (None: every remaining one).
    """

    granularity: str = "sentence"
    pattern: str | None = None
    steps: int = field_rules.CURVE_STEPS.default
    modes: tuple[str, ...] = MODES
    removal: str = "filler"
    filler: str | int = " "
    n_random: int = 10
    seed: int = 0
    batch_size: int = scoring.DEFAULT_BATCH_SIZE
    regions: tuple[tuple[int, int], ...] | None = None
    slice_s: float | None = None
    upper_bound: bool = True
    exhaustive_max_segments: int = search.DEFAULT_EXHAUSTIVE_MAX_SEGMENTS
    greedy_candidates: int | None = search.DEFAULT_GREEDY_CANDIDATES


@dataclasses.dataclass(frozen=True)
class Curve:
    """One curve. `order` lists removable-segment positions (into FaithfulnessReport.segments)
    in removal (deletion) or reveal (insertion) order; for "random" it is the first seed's order
    and `logprobs` is the mean of `all_logprobs` <float64>[R, K+1] (`all_aopc` <float64>[R]:
    each random order's AOPC). `ordering`: "value", "signed" or "abs" for a method; "random" /
    "length" for the baselines; for the upper bound the search that found it ("exhaustive",
    "greedy") or the tested curve that beat the greedy search (e.g. "grad_norm")."""

    name: str
    mode: str
    order: tuple[int, ...]
    logprobs: np.ndarray  # [K+1]
    aopc: float
    all_logprobs: np.ndarray | None = None
    ordering: str = "value"
    all_aopc: np.ndarray | None = None

    @property
    def aopc_std(self) -> float:
        """Standard deviation (ddof=1) of the random orders' AOPCs; 0 for one order or a method."""
        if self.all_aopc is None or len(self.all_aopc) < 2:
            return 0.0
        return float(np.std(self.all_aopc, ddof=1))


@dataclasses.dataclass(frozen=True)
class FaithfulnessReport:
    """Deletion / insertion curves of several methods and the random reference, for one target span.

    Attributes:
      text, prompt_end: the explained text (prompt + target) and where the target starts.
      span: (t0, t1) target tokens whose summed log-prob is measured.
      granularity, removal, filler_id: how segments were removed.
      segments: (start, end) character spans of the S removable prompt segments.
      segment_scores: method -> <float64>[S] salience of each segment.
      n_removed: <int64>[K+1] segments removed (deletion) / revealed (insertion) at point k.
      original_logprob: log p(span | prompt); empty_logprob: with every segment removed.
      curves: mode -> name (method, method + ABS_SUFFIX, "random", "length" or UPPER) -> Curve.
      n_scored: distinct edited prompts scored (forward rows), the upper bound's included.
      upper_bound_rows: forward rows the upper bound's search added (0 without it).
    """

    text: str
    prompt_end: int
    span: tuple[int, int]
    granularity: str
    removal: str
    filler_id: int
    segments: tuple[tuple[int, int], ...]
    segment_scores: Mapping[str, np.ndarray]
    n_removed: np.ndarray
    original_logprob: float
    empty_logprob: float
    curves: Mapping[str, Mapping[str, Curve]]
    seed: int
    n_random: int
    n_scored: int
    upper_bound_rows: int = 0

    @property
    def methods(self) -> list[str]:
        return list(self.segment_scores)

    def ranked(self) -> list[str]:
        """The curve names of the methods, each ordering: "grad_norm", "grad_x_input", "grad_x_input:abs", ..."""
        mode = next(iter(self.curves))
        return [n for n in self.curves[mode] if n not in REFERENCES]

    def bound(self, mode: str = "deletion") -> float | None:
        """The upper bound's AOPC in `mode`, or None when it was not searched."""
        c = self.curves[mode].get(UPPER)
        return None if c is None else c.aopc

    def decidable(self, mode: str = "deletion") -> bool | None:
        """Whether any order can pass the test on this prompt in `mode` (None: no upper bound searched)."""
        b = self.bound(mode)
        if b is None:
            return None
        rnd = self.curves[mode][RANDOM]
        return decidable(b, rnd.aopc, rnd.aopc_std, self.aopc(LENGTH, mode))

    def verdict(self, name: str, mode: str = "deletion") -> str:
        """The verdict of curve `name` (a method or method + ABS_SUFFIX) in `mode` (module docstring)."""
        rnd = self.curves[mode][RANDOM]
        return verdict(self.aopc(name, mode), rnd.aopc, rnd.aopc_std, self.aopc(LENGTH, mode),
                       bound_aopc=self.bound(mode))

    def segment_texts(self) -> list[str]:
        return [self.text[s:e] for s, e in self.segments]

    def aopc(self, name: str, mode: str = "deletion") -> float:
        return self.curves[mode][name].aopc

    def gap(self, method: str, mode: str = "deletion") -> float:
        """AOPC of `method` minus that of the random reference (> 0: better than random)."""
        return self.curves[mode][method].aopc - self.curves[mode][RANDOM].aopc

    def table(self) -> list[dict]:
        """One row per (mode, method, ordering): AOPC, the baselines (random mean and spread, length),
        the gaps to each, the upper bound's AOPC and whether the prompt can decide (None without
        a bound), and the verdict."""
        rows = []
        for mode in self.curves:
            rnd = self.curves[mode][RANDOM]
            length = self.aopc(LENGTH, mode)
            for name in self.ranked():
                c = self.curves[mode][name]
                rows.append({
                    "mode": mode, "method": name.removesuffix(ABS_SUFFIX), "ordering": c.ordering, "name": name,
                    "aopc": c.aopc, "random_aopc": rnd.aopc, "random_std": rnd.aopc_std, "n_random": self.n_random,
                    "length_aopc": length, "gap": c.aopc - rnd.aopc, "gap_length": c.aopc - length,
                    "upper_bound_aopc": self.bound(mode), "decidable": self.decidable(mode),
                    "verdict": self.verdict(name, mode),
                })
        return rows


def aopc(logprobs: np.ndarray, mode: str, original: float, empty: float) -> float:
    """AOPC of one curve (see the module docstring)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    if mode == "deletion":
        return float(np.mean(original - lp))
    return float(np.mean(lp - empty))


def removal_counts(n_segments: int, steps: int) -> np.ndarray:
    """n_k = round(k * S / K) for k = 0..K, K = min(steps, S): <int64>[K+1], from 0 to S."""
    k_max = max(1, min(steps, n_segments))
    return np.rint(np.arange(k_max + 1) * n_segments / k_max).astype(np.int64)


def segment_salience(
    lm: LanguageModel, prompt, target, methods: Sequence[str], span: tuple[int, int],
    result: SalienceResult | None, config: SalienceConfig,
) -> tuple[SalienceResult, dict[str, np.ndarray]]:
    """(result, {method: <float32>[N] salience of the span}); from `result` when it has it,
    else one direct span computation (compute_span_result) for the missing methods."""
    values: dict[str, np.ndarray] = {}
    missing = []
    if result is not None:
        for m in methods:
            try:
                values[m] = np.asarray(result.span_salience(m, *span))
            except SalienceError:
                missing.append(m)
    else:
        missing = list(methods)
    if missing:
        direct = compute_span_result(lm, prompt, target, methods=missing, t0=span[0], t1=span[1], config=config)
        for m in missing:
            values[m] = np.asarray(direct.span_salience(m, *span))
        result = direct if result is None else result
    return result, values


def _token_salience(
    lm: LanguageModel, prompt, target, methods: Sequence[str], span: tuple[int, int],
    result: SalienceResult | None, config: SalienceConfig,
) -> tuple[SalienceResult, dict[str, np.ndarray]]:
    """segment_salience of the token methods among `methods` (a segment method is measured by
    ablation_values instead); with none, `result` or the prompt and target tokenized alone
    (tokenized_result) and {}."""
    token_methods = [m for m in methods if not is_segment_method(m)]
    if token_methods:
        return segment_salience(lm, prompt, target, token_methods, span, result, config)
    return result or tokenized_result(lm, prompt, target), {}


def ablation_values(lm: LanguageModel, prompt, target, methods: Sequence[str], span: tuple[int, int],
                    segs: scoring.PromptSegments, config: "FaithfulnessConfig", result: SalienceResult,
                    ablation_config: AblationConfig | None, progress: Progress | None, cancel: Cancel | None,
                    ) -> dict[str, np.ndarray]:
    """{segment method: <float64>[S] its value of each of `segs`}, measured with the curves' own
    segments and removal (ablation.segment_salience); a segment it does not rank (the text between
    regex matches) gets 0."""
    if not methods:
        return {}
    cfg = ablation_config or AblationConfig(removal=config.removal, filler=config.filler)
    out = {}
    for m in methods:
        got = ablation.segment_salience(lm, prompt, target, m, granularity=config.granularity, pattern=config.pattern, span=span,
                      config=cfg, regions=config.regions, result=result, progress=progress, cancel=cancel,
                      slice_s=config.slice_s)
        by_index = dict(zip(got.segment_index.tolist(), got.values.tolist()))
        out[m] = np.array([by_index.get(int(i), 0.0) for i in segs.index], dtype=np.float64)
    return out


@dataclasses.dataclass(frozen=True)
class CurvesRequest:
    """What faithfulness_curves and faithfulness_stages explain, and how: the arguments they share,
    each meaning said once here.

    Attributes:
      prompt, target: as for compute_salience (the target's tokens are the ones explained).
      methods: salience methods to rank segments by (any registered method; a segment method is
        measured with the curves' own segments and removal, sequence_salience.ablation); one name or
        a sequence, each named once: checked here, before any model work (SalienceError).
      span: (t0, t1) target tokens; None: the whole target.
      config: granularity, steps, removal, filler, random reference (FaithfulnessConfig).
      salience_config: settings for computing salience when `result` lacks it.
      result: a SalienceResult of this prompt and target to take the salience from (no backward).
      ablation_config: the segment methods' settings; None: AblationConfig with the curves' removal
        and filler.
      progress: progress(stage, done, total); cancel: () -> bool, checked between batches.
    """

    prompt: str | ChatPrompt
    target: str | Generation
    methods: Sequence[str] = DEFAULT_METHODS
    span: tuple[int, int] | None = None
    config: FaithfulnessConfig = FaithfulnessConfig()
    salience_config: SalienceConfig = SalienceConfig()
    result: SalienceResult | None = None
    ablation_config: AblationConfig | None = None
    progress: Progress | None = None
    cancel: Cancel | None = None

    def __post_init__(self) -> None:
        methods = distinct_methods((self.methods,) if isinstance(self.methods, str) else self.methods)
        for m in methods:
            get_any_method(m)
        object.__setattr__(self, "methods", methods)


def check_config(config: FaithfulnessConfig) -> None:
    """SalienceError naming the setting and its fix when `config` cannot run."""
    for mode in config.modes:
        if mode not in MODES:
            raise SalienceError(f"Unknown curve mode {mode!r}. Fix: use {' and/or '.join(MODES)}.")
    if config.steps < 1:
        raise SalienceError(f"steps={config.steps}; it must be at least 1 (10 is a good start).")
    if not 0 <= config.exhaustive_max_segments <= MAX_EXHAUSTIVE:
        raise SalienceError(f"exhaustive_max_segments={config.exhaustive_max_segments}; use 0 to {MAX_EXHAUSTIVE} "
                            f"(the exact search scores 2^S prompts; {search.DEFAULT_EXHAUSTIVE_MAX_SEGMENTS} "
                            "is the default).")
    if config.greedy_candidates is not None and config.greedy_candidates < 1:
        raise SalienceError(f"greedy_candidates={config.greedy_candidates}; use at least 1, or None for every "
                            "remaining segment.")


def target_span(lm: LanguageModel, request: CurvesRequest) -> tuple[int, int]:
    """The request's (t0, t1), resolved against its target's tokens (from its result when it has one)."""
    result = request.result
    if result is not None and result.text[:result.prompt_end] != scoring.prompt_text(request.prompt):
        raise SalienceError("`result` was computed for another prompt. Fix: pass the result of this prompt.")
    num_t = len(scoring.target_ids(lm, request.target)) if result is None else result.num_targets
    return scoring.resolve_span(request.span, num_t)


def segment_values(
    lm: LanguageModel, request: CurvesRequest, span: tuple[int, int], given: Mapping[str, np.ndarray] | None,
) -> tuple[SalienceResult, scoring.PromptSegments, dict[str, np.ndarray]]:
    """(result, the removable segments, method -> <float64>[S] each segment's value): from `given`
    (an earlier report's segment_scores), measured by ablation for a segment method, else the span's
    token salience summed over each segment."""
    methods, config = request.methods, request.config
    given = {m: np.asarray(given[m], np.float64) for m in methods if given and m in given}
    result, token_values = _token_salience(lm, request.prompt, request.target, [m for m in methods if m not in given],
                                           span, request.result, request.salience_config)
    segs = scoring.prompt_segments(result, config.granularity, config.pattern, config.regions)
    measured = ablation_values(lm, request.prompt, request.target,
                               [m for m in methods if is_segment_method(m) and m not in given], span, segs, config,
                               result, request.ablation_config, request.progress, request.cancel)
    measured.update(given)
    S = len(segs)
    for m, v in given.items():
        if v.shape != (S,):
            raise SalienceError(f"segment_scores[{m!r}] has {v.shape[0] if v.ndim else 0} values for {S} segments. "
                                "Fix: pass the segment_scores of a report with the same granularity and regions.")
    return result, segs, {m: measured[m] if m in measured else segs.scores(token_values[m]) for m in methods}


def ranked_orders(scores: Mapping[str, np.ndarray], segs: scoring.PromptSegments,
                  ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(curve name -> segment order, curve name -> its ordering) of every curve that is not random:
    each method by its value (most positive first), a signed method also by |value| (name + ABS_SUFFIX,
    largest first), then the length baseline."""
    orders: dict[str, np.ndarray] = {}
    orderings: dict[str, str] = {}
    for m, values in scores.items():  # values: [S]
        signed = get_any_method(m).signed
        orders[m] = np.argsort(-values, kind="stable")
        orderings[m] = "signed" if signed else "value"
        if signed:
            orders[m + ABS_SUFFIX] = np.argsort(-np.abs(values), kind="stable")
            orderings[m + ABS_SUFFIX] = "abs"
    orders[LENGTH] = length_order([len(t) for t in segs.tokens], [e - s for s, e in segs.spans])
    orderings[LENGTH] = LENGTH
    return orders, orderings


@dataclasses.dataclass(frozen=True)
class CurvePlan:
    """Every edited prompt the curves need: prompts[0] the original, prompts[1] the empty prompt, then
    for each entry (mode, curve name, random index or -1) of `curves` its K+1 points, in order."""

    curves: tuple[tuple[str, str, int], ...]
    prompts: tuple[tuple[int, ...], ...]


def plan_curves(result: SalienceResult, edit: scoring.PromptEditor, counts: np.ndarray, orders: Mapping[str, np.ndarray],
                random_orders: Sequence[np.ndarray], config: FaithfulnessConfig) -> CurvePlan:
    """The CurvePlan of the ranked `orders` and the random orders in each of config's modes."""
    everything = range(len(edit.segs))

    def rows_for(order: np.ndarray, mode: str) -> list[tuple[int, ...]]:
        if mode == "deletion":
            return [edit(order[:n]) for n in counts]
        return [edit(set(everything) - set(order[:n].tolist())) for n in counts]

    plan: list[tuple[str, str, int]] = []
    original_ids = tuple(int(i) for i in result.ids[:result.n_prompt_tokens])
    prompts = [original_ids if config.removal == "filler" else edit(()), edit(everything)]
    for mode in config.modes:
        for m in orders:
            plan.append((mode, m, -1))
            prompts.extend(rows_for(orders[m], mode))
        for r, order in enumerate(random_orders):
            plan.append((mode, RANDOM, r))
            prompts.extend(rows_for(order, mode))
    return CurvePlan(tuple(plan), tuple(tuple(p) for p in prompts))


def score_plan(lm: LanguageModel, plan: CurvePlan, target: tuple[int, ...], span: tuple[int, int],
               request: CurvesRequest, memo: dict[tuple[int, ...], float]) -> np.ndarray:
    """<float64>[M] log p(span) of each of plan.prompts: the distinct prompts not in `memo` are scored
    (progress stage "curves") and added to it."""
    config = request.config
    new = [p for p in dict.fromkeys(plan.prompts) if p not in memo]
    fresh = scoring.score(lm, new, target, span, config.batch_size, request.progress, request.cancel, stage="curves",
                          slice_s=config.slice_s)  # [len(new)]
    memo.update(zip(new, (float(v) for v in fresh)))
    return np.array([memo[p] for p in plan.prompts], dtype=np.float64)  # [M]


def plan_curves_of(plan: CurvePlan, lp: np.ndarray, n_points: int, orders: Mapping[str, np.ndarray],
                   orderings: Mapping[str, str], random_orders: Sequence[np.ndarray], modes: Sequence[str],
                   ) -> tuple[dict[str, dict[str, Curve]], dict[str, list[np.ndarray]]]:
    """(mode -> name -> Curve of every ranked order and the random reference, mode -> each random
    order's logprobs <float64>[K+1]) from the plan's scores `lp` <float64>[M]."""
    original, empty = float(lp[0]), float(lp[1])
    curves: dict[str, dict[str, Curve]] = {mode: {} for mode in modes}
    random_rows: dict[str, list[np.ndarray]] = {mode: [] for mode in modes}
    pos = 2
    for mode, name, _ in plan.curves:
        values = lp[pos:pos + n_points]
        pos += n_points
        if name == RANDOM:
            random_rows[mode].append(values)
            continue
        curves[mode][name] = Curve(name, mode, tuple(int(i) for i in orders[name]), values,
                                   aopc(values, mode, original, empty), ordering=orderings[name])
    for mode in modes:
        allr = np.stack(random_rows[mode])  # [R, K+1]
        mean = allr.mean(0)
        each = np.array([aopc(row, mode, original, empty) for row in allr])  # [R]
        curves[mode][RANDOM] = Curve(RANDOM, mode, tuple(int(i) for i in random_orders[0]), mean,
                                     aopc(mean, mode, original, empty), allr, ordering=RANDOM, all_aopc=each)
    return curves, random_rows


def faithfulness_curves(
    lm: LanguageModel,
    request: CurvesRequest,
    *,
    segment_scores: Mapping[str, np.ndarray] | None = None,
    memo: dict[tuple[int, ...], float] | None = None,
) -> FaithfulnessReport:
    """Deletion / insertion curves and AOPC of several methods vs. seeded random orders, in one call.

    Args:
      lm: the model.
      request: what to explain and how (CurvesRequest: prompt, target, methods, span, config, ...).
      segment_scores: method -> <float64>[S] values from an earlier report of the same prompt, target,
        span, granularity, pattern and regions (FaithfulnessReport.segment_scores); the methods found
        there are not computed again (faithfulness_stages).
      memo: edited prompt ids -> log p(span) of this target and span, from an earlier call with the
        same removal and filler: read (those prompts are not scored again) and filled with every
        prompt this call scores, the upper bound's included (faithfulness_stages). n_scored still
        counts every distinct prompt the report uses.
    """
    config = request.config
    check_config(config)
    span = target_span(lm, request)
    result, segs, scores = segment_values(lm, request, span, segment_scores)
    S = len(segs)
    fill = scoring.filler_id(lm, config.filler)
    edit = scoring.PromptEditor(lm, request.prompt, result, segs, config.removal, fill)
    counts = removal_counts(S, config.steps)  # [K+1]
    orders, orderings = ranked_orders(scores, segs)
    rng = np.random.default_rng(config.seed)
    random_orders = [rng.permutation(S) for _ in range(max(1, config.n_random))]
    plan = plan_curves(result, edit, counts, orders, random_orders, config)
    target = tuple(int(i) for i in result.ids[result.n_prompt_tokens:])
    known = {} if memo is None else memo
    lp = score_plan(lm, plan, target, span, request, known)  # [M]
    original, empty = float(lp[0]), float(lp[1])
    curves, random_rows = plan_curves_of(plan, lp, len(counts), orders, orderings, random_orders, config.modes)
    bound_rows = 0
    if config.upper_bound:
        tested = {mode: [(orders[n], curves[mode][n].logprobs, n) for n in orders]
                  + [(o, row, RANDOM) for o, row in zip(random_orders, random_rows[mode])] for mode in config.modes}
        bounds, bound_rows = upper_bound_curves(lm, S, counts, config, edit, known, target, span, curves, tested,
                                                original, empty, request.progress, request.cancel)
        for mode in config.modes:
            curves[mode][UPPER] = bounds[mode]
    return FaithfulnessReport(
        text=result.text, prompt_end=result.prompt_end, span=span, granularity=config.granularity,
        removal=config.removal, filler_id=fill, segments=segs.spans, segment_scores=scores, n_removed=counts,
        original_logprob=original, empty_logprob=empty, curves=curves, seed=config.seed,
        n_random=len(random_orders), n_scored=len(set(plan.prompts)) + bound_rows, upper_bound_rows=bound_rows,
    )


def coarse_rows(steps: int, n_random: int, n_ranked: int, n_modes: int) -> int:
    """Forward rows of a curves pass at most: the original and the empty prompt, then per mode the
    steps - 1 points between them for each ranked order (methods, |value| orders, length) and each
    random order (fewer when prompts coincide or there are fewer segments than steps)."""
    return 2 + n_modes * (steps - 1) * (n_ranked + n_random)


def coarse_config(config: FaithfulnessConfig, tokens_per_row: int | None = None, n_ranked: int = 4,
                  max_tokens: int | None = None) -> FaithfulnessConfig:
    """The preliminary pass of `config` (faithfulness_stages): at most COARSE_STEPS points and
    COARSE_RANDOM random orders (the first of `config`'s, same seed), no upper bound; else the same.

    tokens_per_row: the prompt + target tokens of one scored row; given, the pass is kept within
    `max_tokens` (None: COARSE_MAX_TOKENS) token positions, coarse_rows x tokens_per_row, by fewer
    points first (not below COARSE_MIN_STEPS), then fewer random orders (not below 1), so that a long
    prompt or response still gets its first result soon. n_ranked: the pass's non-random orders.
    """
    steps, n_random = min(config.steps, COARSE_STEPS), min(config.n_random, COARSE_RANDOM)
    if tokens_per_row is not None:
        budget = COARSE_MAX_TOKENS if max_tokens is None else max_tokens
        modes = len(config.modes)

        def cost(k: int, r: int) -> int:
            return coarse_rows(k, r, n_ranked, modes) * tokens_per_row

        while steps > min(COARSE_MIN_STEPS, steps) and cost(steps, n_random) > budget:
            steps -= 1
        while n_random > min(1, n_random) and cost(steps, n_random) > budget:
            n_random -= 1
    return dataclasses.replace(config, steps=steps, n_random=n_random, upper_bound=False)


def distinct_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """`methods` as a tuple; SalienceError when one is named twice (field_rules.distinct_names: each repeat
    would be computed again)."""
    try:
        return field_rules.distinct_names(methods)
    except field_rules.FieldError as e:
        raise SalienceError(f"methods {list(methods)!r:.200}: {e}.") from None


def faithfulness_stages(
    lm: LanguageModel,
    request: CurvesRequest,
    *,
    on_coarse: Callable[[FaithfulnessReport], None] | None = None,
) -> FaithfulnessReport:
    """faithfulness_curves in two stages, for a person who waits: a coarse report first, then `config`'s.

    1. coarse: faithfulness_curves with coarse_config(request.config) (few points, few random orders, no
       upper bound; fewer still when this prompt and target are long: coarse_config's
       tokens_per_row); its report goes to `on_coarse` as soon as it is ready. Progress names its
       scoring COARSE_STAGE.
    2. refine: faithfulness_curves with request.config, reusing the coarse pass's segment values (no
       second salience or segment-method pass) and every edited prompt it scored (its first random
       orders and many curve points are the same prompts), so only the rows it lacks are scored
       (progress "curves", then "upper_bound"). Its report, returned, equals a direct
       faithfulness_curves(request) up to the float noise of batching.

    When coarse_config(request.config) == request.config there is one pass and `on_coarse` is not
    called. The request's `cancel` stops either stage (ComputationCancelled).
    """
    config, progress = request.config, request.progress
    if coarse_config(config) == config:  # its size for this prompt and target: below, once the tokens are known
        return faithfulness_curves(lm, request)

    def coarse_progress(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(COARSE_STAGE if stage == "curves" else stage, done, total)

    if request.result is None:  # computed once here, so that the refinement needs no forward pass for it
        span = scoring.resolve_span(request.span, len(scoring.target_ids(lm, request.target)))
        result, _ = _token_salience(lm, request.prompt, request.target, request.methods, span, None,
                                    request.salience_config)
        request = dataclasses.replace(request, span=span, result=result)
    n_ranked = 1 + sum(2 if get_any_method(m).signed else 1 for m in request.methods)  # + the length order
    coarse = coarse_config(config, tokens_per_row=len(request.result.ids), n_ranked=n_ranked)
    memo: dict[tuple[int, ...], float] = {}
    first = faithfulness_curves(lm, dataclasses.replace(request, config=coarse, progress=coarse_progress), memo=memo)
    if on_coarse is not None:
        on_coarse(first)
    return faithfulness_curves(lm, dataclasses.replace(request, span=first.span),
                               segment_scores=first.segment_scores, memo=memo)


def upper_bound_curves(
    lm: LanguageModel, n_segments: int, counts: np.ndarray, config: FaithfulnessConfig, edit,
    known: Mapping[tuple[int, ...], float], target: Sequence[int], span: tuple[int, int],
    curves: Mapping[str, Mapping[str, Curve]], tested: Mapping[str, Sequence[tuple[np.ndarray, np.ndarray, str]]],
    original: float, empty: float, progress: Progress | None, cancel: Cancel | None,
) -> tuple[dict[str, Curve], int]:
    """The UPPER curve per mode and the forward rows its search added (upper_bound.py).

    known: prompts already scored -> log p; tested: mode -> (order, logprobs <float64>[K+1], name)
    of every order the test scored; the bound is never below the best of them.
    """
    S = n_segments
    modes = list(curves)
    exact = S <= config.exhaustive_max_segments
    cand = config.greedy_candidates
    planned = (search.exhaustive_rows(S, counts) if exact
               else len(modes) * search.greedy_rows(S, counts, cand))
    scorer = search.MemoScorer(lm, target, span, known, batch_size=config.batch_size, slice_s=config.slice_s,
                               progress=progress, cancel=cancel, planned=planned)
    out: dict[str, Curve] = {}
    best = {mode: max(tested[mode], key=lambda t, mode=mode: aopc(t[1], mode, original, empty)) for mode in modes}
    if exact:
        found = search.exhaustive(S, counts, modes, edit, scorer)
    else:
        found = search.greedy(S, counts, modes, edit, scorer, {m: [int(i) for i in best[m][0]] for m in modes}, cand)
    if isinstance(known, dict):
        known.update(scorer.memo)  # the caller's memo (faithfulness_curves(memo=...)) keeps the search's rows
    for mode in modes:
        best_tested = best[mode]
        res = found[mode]
        a = aopc(res.logprobs, mode, original, empty)
        order, logprobs, ordering = res.order, res.logprobs, res.search
        if aopc(best_tested[1], mode, original, empty) > a:  # greedy only: a tested order did better
            order, logprobs, ordering = best_tested[0], np.asarray(best_tested[1]), best_tested[2]
        out[mode] = Curve(UPPER, mode, tuple(int(i) for i in order), np.asarray(logprobs, np.float64),
                          aopc(logprobs, mode, original, empty), ordering=ordering)
    return out, scorer.rows
