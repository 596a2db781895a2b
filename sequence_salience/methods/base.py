"""Types shared by the salience methods: model inputs, method outputs, the method record."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from sequence_salience.errors import SalienceError
from sequence_salience.field_rules import FieldRule

if TYPE_CHECKING:  # slices.py needs no method types; imported for the annotation only
    from sequence_salience.slices import SliceSizer


@dataclasses.dataclass(frozen=True)
class SalienceConfig:
    """Settings of the token methods; one frozen value, flags only at the edges.

    The fields declared here are the engine's, shared by every method. Each token method's own settings
    (integrated gradients' steps, baseline and quadrature rule; SmoothGrad's samples, noise and seed; ...)
    are declared in its module, as the frozen dataclass of its record's `settings`, and join this class
    when the method is registered (methods/__init__.py `register`, `add_settings` below): a config takes
    them as keyword arguments, reads them as attributes and saves them by name, exactly as the fields here.

    Attributes:
      target_chunk_size: most target tokens whose gradients one batched backward computes;
        bounds memory (each costs about one backward's activations).
      chunk_token_budget: most (target tokens x rows x sequence length) per batched backward, so
        long prompts take fewer targets per chunk: memory stays bounded and progress,
        cancellation and other requests get a turn every few seconds. The sampled methods
        also take fewer steps or samples per forward (methods/sampling.py: one rule for all).
      ig_step_chunk_size: steps or samples of a sampled method (methods/sampling.py) run in one forward batch.
      graph_token_budget: most (rows x sequence length) in one forward whose graph a backward needs, so the
        sampled methods take fewer steps or samples per forward on longer prompts (methods/sampling.py). The
        graph held every layer's activations until the backward: on the default model (SmolLM2-135M) about
        1.5 MB per row-token at a pass's peak, so IG's 4 steps over a 239-token span took +870-1,117 MB
        (docs/benchmarks.md, "Session 32 (h2)"); since its layers are recomputed in the backward
        (methods/gradients.py `layers_recomputed`) a pass peaks at about 0.5-0.6 MB per row-token ("Session 34
        (h1)"). 512 leaves prompts of up to 64 tokens their 8 steps per forward; one row is always allowed.
      span_graph_token_budget: the same bound for a span's steps or samples (methods/sampling.py
        `sampled_span_gradient`: a clicked span's IG or SmoothGrad), tighter: a person waits for it while other
        work is paused beside it, and its chunk's memory came on top of theirs. 8 rows of the 10-minute soak's
        56-token span held the server's peak (+26-37 %, docs/benchmarks.md "Session 36 (h1)"); 128 gives such
        a prompt 2 steps per forward.
      backward: how per-target gradients are batched: "vmap" (one vmapped backward per
        chunk of targets, torch.autograd.grad(is_grads_batched=True)), "loop" (one shared
        forward, then one backward per target reusing its graph), or "auto" (vmap on every
        device, loop for a model whose vmapped backward failed; see methods/gradients.py).
    """

    target_chunk_size: int = 16
    chunk_token_budget: int = 8192
    ig_step_chunk_size: int = 8
    graph_token_budget: int = 512
    span_graph_token_budget: int = 128
    backward: str = "auto"

    def targets_per_chunk(self, seq_len: int, rows: int = 1) -> int:
        """Target tokens per batched backward for `rows` sequences of length `seq_len`."""
        return max(1, min(self.target_chunk_size, self.chunk_token_budget // max(1, seq_len * rows)))


# The dunder attributes of a dataclass that depend on its fields (dataclasses' own names).
_FIELD_DEPENDENT = ("__init__", "__repr__", "__eq__", "__hash__", "__match_args__", "__dataclass_fields__")


def add_settings(config: type, settings: type, owner: str) -> None:
    """Adds the fields of `settings` (a frozen dataclass: one method's own settings) to the frozen dataclass
    `config` (SalienceConfig or AblationConfig), in place.

    The class object stays the same, so every module that imported it sees the new fields: its constructor,
    dataclasses.replace, ==, hash, repr, dataclasses.fields (the saved JSON of sequence_salience/result.py)
    take them; an instance made before reads their defaults (class attributes, as for any dataclass field
    with a default). Raises SalienceError when a name is already a field (two methods, or a method and the
    engine, would share one setting) or a field has no plain default.
    """
    have = {f.name: f for f in dataclasses.fields(config)}
    new = dataclasses.fields(settings)
    clash = sorted(have.keys() & {f.name for f in new})
    if clash:
        raise SalienceError(f"{owner}'s settings {clash} are already {config.__name__} fields. Fix: name a method's "
                            f"settings after the method (its count rule too), e.g. '{owner}_samples'.")
    plain = [f.name for f in new if f.default is dataclasses.MISSING]
    if plain:
        raise SalienceError(f"{owner}'s settings {plain} have no default. Fix: give every setting a default "
                            "(a method's count takes its rule's: `= COUNT.default`).")
    spec = [(f.name, f.type, dataclasses.field(default=f.default, metadata=f.metadata))
            for f in (*have.values(), *new)]
    fresh = dataclasses.make_dataclass(config.__name__, spec, frozen=True)
    for attr in _FIELD_DEPENDENT:
        setattr(config, attr, getattr(fresh, attr))
    for f in new:
        setattr(config, f.name, f.default)


def settings_of(settings: type, config: object):
    """The `settings` dataclass (one method's own settings) with the values `config` holds."""
    return settings(**{f.name: getattr(config, f.name) for f in dataclasses.fields(settings)})


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """A padded batch of (prompt + target) sequences, ready for inputs_embeds forward passes.

    Attributes:
      model: the causal LM (eval mode, parameters frozen).
      embeds: <float>[B, L, D] input embeddings (detached).
      attention_mask: <int64>[B, L] 1 for real tokens.
      position_ids: <int64>[B, L].
      target_ids: <int64>[B, T] target token ids (0 where padded).
      target_positions: <int64>[B, T] index in L of each target token (>= 1).
      target_mask: <bool>[B, T] True for real target tokens.
      embedding_matrix: <float>[V, D] the input embedding table (for baselines).
      pad_id: pad (or EOS) token id, or None.
    """

    model: torch.nn.Module
    embeds: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    target_ids: torch.Tensor
    target_positions: torch.Tensor
    target_mask: torch.Tensor
    embedding_matrix: torch.Tensor
    pad_id: int | None

    def repeat(self, n: int) -> "ModelInputs":
        """Each example repeated n times consecutively (row b * n + s), e.g. once per IG step."""
        rep = lambda t: t.repeat_interleave(n, dim=0)
        return dataclasses.replace(
            self,
            embeds=rep(self.embeds),
            attention_mask=rep(self.attention_mask),
            position_ids=rep(self.position_ids),
            target_ids=rep(self.target_ids),
            target_positions=rep(self.target_positions),
            target_mask=rep(self.target_mask),
        )


@dataclasses.dataclass(frozen=True)
class MethodOutput:
    """matrix: <float32>[B, T, L]; extras: named arrays such as the Gram tensor or IG deltas."""

    matrix: np.ndarray
    extras: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)


class SharedWork:
    """Work the methods of one salience call share, computed by the first that needs it.

    Attributes:
      target_gradients: None, or (logprobs <float32>[B, T], grads <float32>[T, B, L, D]) at the input,
        the one backward of the gradient-at-the-input methods (methods/shared.py `target_gradients`).
    """

    def __init__(self) -> None:
        self.target_gradients: tuple[torch.Tensor, torch.Tensor] | None = None


@dataclasses.dataclass(frozen=True)
class MethodContext:
    """What one salience call hands each method's `compute`, typed (the engine makes one per method).

    Attributes:
      progress: None, or called with the number of progress units just finished (SalienceMethod.progress_total
        says how many there are); it may raise to cancel the computation.
      sizer: None, or the call's time-slice sizer (sequence_salience/slices.py), one for every method of the
        call: a unit costs one target's backward over one row.
      shared: the call's SharedWork (one object for every method of the call).
    """

    progress: Callable[[int], None] | None = None
    sizer: SliceSizer | None = None
    shared: SharedWork = dataclasses.field(default_factory=SharedWork)


@dataclasses.dataclass(frozen=True)
class ResultExtra:
    """A named array a method adds to each SalienceResult it computes (`result.extras[name]`).

    Attributes:
      name: its key in SalienceResult.extras and in saved JSON; unique over the registry.
      output_key: its key in the method's MethodOutput.extras (padded batch, batch axis first).
      axes: the axes after the batch axis, one letter each: "L" a sequence position (the example's own N
        tokens are kept), "T" a target token (its first T are kept); "LTT" for an [N, T, T] array.
      help: what it holds.
      payload: None, or its key in the method's entry of the server's salience payload (lit_app/wrappers/payloads.py),
        present in every entry of the method (null until the matrices are computed); an "LTT" array is sent as
        its packed upper triangle <[N, T*(T+1)/2]>.
    """

    name: str
    output_key: str
    axes: str
    help: str
    payload: str | None = None

    def unpad(self, batch_value: np.ndarray, b: int, cols: np.ndarray, num_t: int) -> np.ndarray:
        """Example b's array of the padded batch's `batch_value` <[B, *axes]>: <float32>[*axes] over its own
        tokens (`cols`: its positions in the batch) and targets."""
        out = np.asarray(batch_value[b])
        for axis, letter in enumerate(self.axes):
            out = np.take(out, cols if letter == "L" else np.arange(num_t), axis=axis)
        return out.astype(np.float32)


COUNT_UNITS = ("steps", "samples")


@dataclasses.dataclass(frozen=True)
class SalienceMethod:
    """One salience method in the registry (methods/__init__.py); the single source of its facts.

    Attributes:
      name: snake_case id used by the API, the server and the UI.
      label: human-readable name ("Gradient × input").
      short: short name for narrow UI places ("G×I", "IG").
      menu: None (the label), or the name the Sequence Salience module's method select shows where the label is too
        long for it (the select is narrow, so that the controls stay on one line at 1280×720; the browser test
        tests/e2e/test_method_help.py checks that each fits); the label stays in the status line, legend and help.
        Not `short`: `short` goes inside a phrase ("IG steps", "Show gradient (G×I)"), `menu` names the method alone
        (IG's is its label: "IG" alone says too little), so neither can replace the other without changing the page.
      signed: values can be negative (diverging colour map) or not (sequential).
      linear: the salience of a target span is the sum of its tokens' rows.
      compute: (inputs, config, context: MethodContext) -> MethodOutput for every target token;
        the context carries the call's progress callback, time-slice sizer and shared work.
      compute_span: (inputs, weights <float>[B, T], config, progress=None) -> <float32>[B, L]:
        the salience of sum_t weights[b, t] * log p(target_t), computed directly;
        `progress(units)` (optional) is called after each chunk of steps or samples.
      paper: link to the method's paper.
      cost_unit: a short phrase saying what one unit of work is ("one backward per target").
      trust: one sentence saying when to trust the method's map (published; the module's help shows it).
      from_gradient: for gradient-at-the-input methods, (grad <float>[B, L, D], embeds
        <float>[B, L, D]) -> <float32>[B, L]; methods that have it share one backward
        when several spans are computed at once (salience.compute_span_result).
      count: None, or the rule of the method's count of steps or samples (a FieldRule declared in the method's
        module, sequence_salience/field_rules.py): its name is the `settings` field holding the count, the LIT
        input field and the CLI flag, with its range and default.
      count_unit: None, or what the count counts: "steps" or "samples".
      progress_counts: compute()'s progress counts (target x count) units; else whole targets.
      span_error: optional (inputs, weights <float>[B, T], config, attributions <float32>[B, L])
        -> <float32>[B]: the error of a span's attributions (IG's completeness error).
      result_extras: the named arrays the method adds to its results (SalienceResult.extras), e.g.
        grad_norm's Gram tensor and IG's completeness error per target token.
      error_extra: None, or the result extra holding `span_error` per target token <float32>[T] (IG's completeness
        error): the view sums it over the span shown and warns when it is large (display/view.py).
      span_gram: None, or the result extra holding a non-linear method's Gram tensor <float32>[N, T, T] of
        per-target gradient vectors, from which result.span_salience gets any span exactly
        (result.span_from_rows; grad_norm's "grad_gram").
      settings: None, or the method's own settings: a frozen dataclass whose fields (each with a default; the
        count's field named and defaulted by `count`) join SalienceConfig when the method is registered.
        A field's metadata may name its CLI flag: {"flag": "--x", "help": "...", "metavar": "PATH", "type": float,
        "check": f} (argparse's type, default: text; `check(value)` raises SalienceError naming the fix for a value
        the method cannot use, e.g. a file that is not an estimator; the count's flag comes from its rule). A
        segment method's flagged setting is also a server flag of the field's name (lit_app/schema/method_registry.py
        SERVER_SETTINGS).
      most_units: None, or (config) -> the most count units compute may run under config when that is more than the
        count (IG's step search: every count up to its cap); progress totals count them, so the bar moves while later
        counts run and fills when the method ends (salience.py _MethodProgress.finish). None: the count.
      job_tag: a counted method's background job kind prefix on the server (the job of count n is
        f"{job_tag}{n}"); None: the method's name.
      matrix_detail: a counted method's `detail` value that starts its per-token matrix job on the server;
        None: f"{name}_matrix".
    """

    name: str
    label: str
    short: str
    signed: bool
    linear: bool
    compute: Callable[[ModelInputs, SalienceConfig, MethodContext], MethodOutput]
    compute_span: Callable[..., np.ndarray]
    paper: str
    cost_unit: str
    trust: str
    from_gradient: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    count: FieldRule | None = None
    count_unit: str | None = None
    progress_counts: bool = False
    span_error: Callable[..., np.ndarray] | None = None
    result_extras: tuple[ResultExtra, ...] = ()
    span_gram: str | None = None
    kind: str = "token"
    granularities: tuple[str, ...] | None = None  # every granularity: aggregation needs no model pass
    error_extra: str | None = None
    settings: type | None = None
    job_tag: str | None = None
    matrix_detail: str | None = None
    most_units: Callable[[SalienceConfig], int] | None = None
    menu: str | None = None

    @property
    def title(self) -> str:
        """Former name of `label` (read-only alias)."""
        return self.label

    count_field = property(lambda self: _count_field(self), doc="The count rule's name, or None.")
    default_count = property(lambda self: _default_count(self), doc="The count rule's default; 0 without one.")

    def count_in(self, config: SalienceConfig) -> int:
        """The method's count in `config` (steps or samples); 1 for a method without one."""
        return int(getattr(config, self.count.name)) if self.count else 1

    def span_units(self, config: SalienceConfig) -> int:
        """Progress units of compute_span: one per step or sample (the most a search may run), else one pass."""
        return self.count_in(config) if self.most_units is None else self.most_units(config)

    def progress_total(self, num_targets: int, config: SalienceConfig) -> int:
        """Progress units of compute() for `num_targets` target tokens."""
        return num_targets * (self.span_units(config) if self.progress_counts else 1)

    def to_json(self) -> dict:
        """The JSON-able facts of the method (no callables), as registry_json lists them."""
        return _record_json(self)

    @property
    def job_kind(self) -> str:
        """The server's background job kind prefix of this counted method (`job_tag`, else its name)."""
        return self.job_tag or self.name

    @property
    def matrix_job_detail(self) -> str:
        """The `detail` value that starts this counted method's per-token matrix job (`matrix_detail`)."""
        return self.matrix_detail or f"{self.name}_matrix"


def _count_field(method: SalienceMethod | SegmentMethod) -> str | None:
    return method.count.name if method.count else None


def _default_count(method: SalienceMethod | SegmentMethod) -> int:
    return int(method.count.default) if method.count else 0


def budget_rows(budget: tuple[float, int], n_segments: int) -> int:
    """The ablated prompts of a method with a `budget` (share, at_least) on `n_segments` segments:
    min(n_segments, max(at_least, floor(share x n_segments)))."""
    share, at_least = budget
    return min(n_segments, max(at_least, math.floor(share * n_segments)))


def _record_json(method: SalienceMethod | SegmentMethod) -> dict:
    """{name, label, short, menu, signed, linear, count_field, count_unit, default_count, cost_unit, trust, kind,
    granularities, first_look, budget, exact_measured} (menu: the record's, else its label; granularities: None for
    every granularity, else the list a segment method computes at; first_look: a segment method's
    SegmentMethod.first_look, else None; budget: {share, at_least} of a segment method's SegmentMethod.budget, else
    None; exact_measured: a segment method's, else False)."""
    only = getattr(method, "granularities", None)
    budget = getattr(method, "budget", None)
    return {"name": method.name, "label": method.label, "short": method.short, "menu": method.menu or method.label,
            "signed": method.signed, "linear": method.linear, "count_field": method.count_field,
            "count_unit": method.count_unit, "default_count": method.default_count, "cost_unit": method.cost_unit,
            "trust": method.trust, "kind": method.kind,
            "granularities": list(only) if only is not None else None,
            "first_look": getattr(method, "first_look", None),
            "budget": None if budget is None else {"share": float(budget[0]), "at_least": int(budget[1])},
            "exact_measured": bool(getattr(method, "exact_measured", False))}


# Segment methods: values measured on a segmentation of the prompt by removing segments and
# re-scoring the target (forward passes only), instead of a gradient at every token.

SEGMENT_REMOVALS = ("filler", "delete")  # the explanation tests' removals (scoring.py REMOVALS)


@dataclasses.dataclass(frozen=True)
class AblationConfig:
    """Settings of the segment methods; one frozen value.

    The fields declared here are the ablation engine's (sequence_salience/ablation), shared by every segment
    method. Each segment method's own settings (the surrogate's ablations, keep probability, Lasso weight and
    fit checks; coarse-to-fine's k; the attention estimator's file) are declared in its module, as the frozen
    dataclass of its record's `settings`, and join this class when the method is registered (`add_settings`),
    as SalienceConfig's do.

    Attributes:
      removal: how a segment is removed, as the explanation tests do: "filler" (each of its tokens
        replaced by one filler token: positions and the token count stay) or "delete" (its text
        deleted and the prompt re-tokenized).
      filler: the filler, a one-token text or a token id.
      seed: seed of the random ablations.
      batch_size: most ablated prompts per forward batch.
      chunk_token_budget: most (rows x tokens recomputed) per forward batch (memory), as
        SalienceConfig.chunk_token_budget bounds a backward.
      reuse_prefix: run each ablation from its first changed token on, over the cached keys and
        values of the unchanged prefix (exact; False: one full forward per ablation).
    """

    removal: str = "filler"
    filler: str | int = " "
    seed: int = 0
    batch_size: int = 8
    chunk_token_budget: int = 8192
    reuse_prefix: bool = True


@dataclasses.dataclass(frozen=True)
class SegmentTokens:
    """The model and tokens of a segment problem, for a method that reads the model itself (attention_attribution).

    Attributes:
      lm: the LanguageModel (sequence_salience.model; not imported here).
      ids: the token ids of prompt + target.
      n_prompt_tokens: P; target token t sits at position P + t.
      span: (t0, t1) the target tokens explained.
      segment_tokens: S arrays of token positions (into `ids`), one per removable segment.
      span_features: None, or <float32>[S, L*H] the attention of the span's rows to each segment per layer and head,
        recorded during the unedited prompt's forward (for a record with `reads_attention`; attention/features.py).
      span_gradient: None, or () -> <float32>[N] the gradient norm of log p(span) at each token (grad_norm's span
        salience): the caller's result's when it holds that span (the server's first highlight), else one forward +
        backward on the first call (attention_verified orders its candidates by it; ablation/engine.py).
    """

    lm: object
    ids: tuple[int, ...]
    n_prompt_tokens: int
    span: tuple[int, int]
    segment_tokens: tuple[np.ndarray, ...]
    span_features: np.ndarray | None = None
    span_gradient: Callable[[], np.ndarray] | None = None


@dataclasses.dataclass(frozen=True)
class SegmentProblem:
    """What a segment method works on, prepared by sequence_salience.ablation.

    Attributes:
      n_segments: S, the removable segments of the prompt.
      edit: removed segment positions (0..S-1) -> token ids of the edited prompt.
      score: edited prompts -> <float64>[M] log p(target span | prompt), batched forwards.
      original_logprob: log p(target span | the unedited prompt).
      span_tokens: target tokens in the span (the surrogate fits log-odds per token, as ContextCite).
      tokens: None, or the model and token positions (SegmentTokens) for a method that reads the model itself.
      parents: for a method whose record has `coarser` (coarse_to_fine), the units of the coarser granularities
        holding each segment, coarsest first: one <int64>[S] per granularity of `parent_granularities`
        (an index into that granularity's segmentation); empty for the other methods.
      parent_granularities: the names of those coarser granularities ("paragraph", "sentence").
      frame: (label, rows done before, rows in all so far[, rows done once the next call ends]) -> None: how the
        progress of the next `score` calls is reported (a method scoring in several calls keeps one count:
        "refining: 30 / 52"); the fourth, where the total counts calls still to come (word_verified's second
        batch), defaults to the total.
      known: {segment position: its exact leave-one-out value} already measured on this prompt, target, span,
        segmentation, removal and filler (an earlier result's, ablation.known_values); leave_one_out scores only
        the other segments. Empty: none known.
      partial: SegmentOutput -> None: a method's results so far, before it returns (attention_verified: the
        estimate, nothing measured, then after each verification batch); the caller may show them meanwhile.
    """

    n_segments: int
    edit: Callable[[Sequence[int]], tuple[int, ...]]
    score: Callable[[Sequence[Sequence[int]]], np.ndarray]
    original_logprob: float
    span_tokens: int
    tokens: SegmentTokens | None = None
    parents: tuple[np.ndarray, ...] = ()
    parent_granularities: tuple[str, ...] = ()
    frame: Callable[..., None] = lambda label, before, total, end=None: None
    known: Mapping[int, float] = dataclasses.field(default_factory=dict)
    partial: Callable[["SegmentOutput"], None] = lambda out: None


# The `coarse_granularity` mark of a segment whose value is a method's estimate, not a coarser unit's measured
# value (attention_verified's unverified segments); any other non-empty mark names the coarser unit.
ESTIMATE_MARK = "estimate"


def unmeasured_note(mark: str, value: float) -> str:
    """What a segment's value is when it was not measured: "inside a sentence that did not matter (coarse value
    0.012)", or "estimated, not measured (estimate 0.012)" for ESTIMATE_MARK (frontend/src/salience/coarse.ts
    words the browser's the same way)."""
    if mark == ESTIMATE_MARK:
        return f"estimated, not measured (estimate {value:.3g})"
    return f"inside a {mark} that did not matter (coarse value {value:.3g})"


def unmeasured_origin(marks: Sequence[str]) -> str:
    """Where the values not measured come from, in words, for a summary line: "inside a sentence or paragraph that
    did not matter (its coarse value shared among its parts)", "estimated, not measured", or both ("; ")."""
    marks = sorted({m for m in marks if m})
    units = [m for m in marks if m != ESTIMATE_MARK]
    parts = []
    if units:
        parts.append(f"inside a {' or '.join(units)} that did not matter (its coarse value shared among its parts)")
    if ESTIMATE_MARK in marks:
        parts.append("estimated, not measured")
    return "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class SegmentOutput:
    """values: <float64>[S] one value per removable segment (positive: the segment raises p(target));
    kept: <bool>[R, S] which segments each scored ablation kept; logprobs: <float64>[R] its log p;
    quality: named figures of the fit (the surrogate's held-out "r2" and "correlation");
    measured: None (every value measured) or <bool>[S] whether segment s's own value was measured (coarse_to_fine:
    False inside a coarser unit that did not matter); coarse_values: None or <float64>[S] the measured value of
    that unit (NaN where measured); coarse_granularity: S names of its granularity ("" where measured)."""

    values: np.ndarray
    kept: np.ndarray
    logprobs: np.ndarray
    quality: Mapping[str, float] = dataclasses.field(default_factory=dict)
    measured: np.ndarray | None = None
    coarse_values: np.ndarray | None = None
    coarse_granularity: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class SegmentMethod:
    """One segment method in the registry (methods/__init__.py); the single source of its facts.

    Its values live on a segmentation (sentence, line, paragraph, role, regex matches; word on
    request), so a change of granularity recomputes them (no model pass for gradient methods).

    Attributes:
      name, label, short, menu, signed, paper, cost_unit, trust: as SalienceMethod.
      compute: (problem, config) -> SegmentOutput.
      rows: (n_segments, config) -> the ablated prompts it scores (progress total, cost model); for
        coarse_to_fine an estimate (how far it refines depends on the values).
      count, count_unit: as SalienceMethod (the rule's name is the AblationConfig field of its count).
      coarser: None, or granularity -> the coarser granularities (coarsest first) whose units the method
        needs (SegmentProblem.parents); raises SalienceError at a granularity it cannot refine.
      granularities: None (every granularity), or the granularities the method computes at; published
        (to_json) so that the browser offers the method only there.
      reads_attention: the engine records the target span's attention to each segment during the forward of the
        unedited prompt that it runs anyway (SegmentTokens.span_features), so the method needs no forward of its own.
      settings: as SalienceMethod, its fields joining AblationConfig.
      warning: None, or (quality, config) -> what makes the values doubtful, with the fix ("" when nothing
        does): the surrogate's fit (ablation.fit_warning reads it).
      exact_measured: its measured segments' values (SegmentOutput.measured; all when None) are exact leave-one-out
        values, the same removal of one segment scored by the same scorer, so that leave one out can take them from
        its result instead of scoring them again (SegmentProblem.known; ablation.known_values checks the settings).
      first_look: None, or the segment method whose values this one reports first, before it measures anything
        (SegmentProblem.partial; attention_verified: attention_attribution's estimate), so that a view can name them.
      budget: None, or (share, at_least): the method scores min(S, max(at_least, floor(share x S))) ablated prompts of
        S segments (`budget_rows`; word_verified: a quarter, at least five), published so that a view states its cost
        before it runs; None: `rows` is not a rule the view can apply.
    """

    name: str
    label: str
    short: str
    signed: bool
    compute: Callable[[SegmentProblem, AblationConfig], SegmentOutput]
    rows: Callable[[int, AblationConfig], int]
    paper: str
    cost_unit: str
    trust: str
    count: FieldRule | None = None
    count_unit: str | None = None
    kind: str = "segment"
    linear: bool = False
    coarser: Callable[[str], tuple[str, ...]] | None = None
    granularities: tuple[str, ...] | None = None
    settings: type | None = None
    reads_attention: bool = False
    warning: Callable[[Mapping[str, float], AblationConfig], str] | None = None
    exact_measured: bool = False
    first_look: str | None = None
    budget: tuple[float, int] | None = None
    menu: str | None = None

    count_field = property(lambda self: _count_field(self), doc="The count rule's name, or None.")
    default_count = property(lambda self: _default_count(self), doc="The count rule's default; 0 without one.")

    def to_json(self) -> dict:
        """The JSON-able facts of the method (no callables), with the keys of SalienceMethod.to_json."""
        return _record_json(self)
