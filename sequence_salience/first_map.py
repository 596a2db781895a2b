"""Which map a user sees first at each coarse granularity, from measured agreement with exact leave-one-out.

At sentence granularity and coarser the map a researcher can trust is exact leave one segment out, which costs
one forward per segment. While it runs, the view shows a first map: the fastest method whose agreement with
exact leave-one-out, measured on held-out prompts, is good enough (`FIRST_MAP_BAR`); where no method passes, the
gradient's (the first highlight, one forward + backward). Exact leave-one-out then confirms the first map or
shows what changed (docs/architecture.md, "What the user sees first").

The figures are data, not code: `AGREEMENT_FILE` (sequence_salience/attention/held_out_agreement.json, written by
the held-out evaluation of docs/benchmarks.md), schema

    {"source": str, "granularities": {"<granularity>": {"<method>": {"n": int, "spearman": float,
                                                                      "top1": float, "top3": float}}}}

with `top1` the share of prompts whose top segment is leave-one-out's, `top3` the mean share of leave-one-out's
top three among the method's top three, `spearman` the mean rank correlation with leave-one-out over the segments.
The rule (`choose_first_maps`) is a pure function of those figures and the methods' costs.

Why the bar's n counts the prompts at one granularity, not pooled over sentence, line and paragraph (the "sentence
and coarser" family; docs/benchmarks.md "Session 31" and "Session 32 (h3)"): each held-out prompt is measured at one
granularity, so no granularity reached `min_n` alone in session 32, and pooling would have (105 prompts). Pooling would be justified if
one rate described all three. It did not for the rule before session 32 (the estimate's top 7: +0.14 over the
gradient's top-3 at sentence and line, -0.01 at paragraph, docs/benchmarks.md "Session 32 (h3)"), and a pooled
comparison would have let it replace the gradient at paragraph on the strength of the other two. The rule that
ships (alternating candidates, 4-12 verified, "Session 32 (lead)") is over 2/3 and over the gradient at each
granularity (top-3 sentence 0.69, line 0.77, paragraph 0.80; gradient 0.50, 0.56, 0.60), but a granularity is also
a population in this evaluation (sentence: the prompts up to 800 tokens; paragraph: the longer ones; line: the
principles prompts), so a pooled rate mixes lengths and kinds rather than measuring the method at a granularity.
So `min_n` stays per granularity. Session 33 measured more held-out prompts, chosen by granularity (kind and
length), never by result, in fixed batches up to the bar's 50, then 4 of 2,400-4,000 tokens: 157 in all,
sentence 51, paragraph 55, line 51 (docs/benchmarks.md "Session 33 (lead)"). At each of the three
`attention_verified` now clears the bar (top-1 1.00; top-3 0.71, 0.83, 0.76) and is the first map. The bar reads
point estimates: sentence's top-3 has a 95 % bootstrap interval of 0.65-0.77, which includes 2/3.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Mapping

from sequence_salience.errors import SalienceError

AGREEMENT_FILE = pathlib.Path(__file__).parent / "attention" / "held_out_agreement.json"

# The granularities with a first map: sentence and coarser (word and token have the coarse-to-fine button instead;
# a regex's matches are no fixed unit that an evaluation could measure).
FIRST_MAP_GRANULARITIES: tuple[str, ...] = ("sentence", "line", "paragraph", "role")
# The segment count at which the methods' costs are compared (`method_costs`): the median of the held-out
# prompts' 8-42 segments (20.5, docs/benchmarks.md). Only the order of the costs matters: one forward for the
# attention estimate, one per segment for leave-one-out, one per mask (32) for the surrogate.
TYPICAL_SEGMENTS = 20


@dataclasses.dataclass(frozen=True)
class Agreement:
    """One method's agreement with exact leave-one-out at one granularity, over `n` held-out prompts."""

    n: int
    spearman: float
    top1: float
    top3: float


@dataclasses.dataclass(frozen=True)
class AgreementBar:
    """What "good enough to be the first map" means (module docstring). Why each number:

    Attributes:
      min_n: held-out prompts below which a rate is not read: at 50 prompts a top-1 rate of 0.8 has a 95 %
        interval of about ±0.11, so a passing method is still better than even odds of 0.69; at 9 (the sentence
        prompts of the first 54-prompt evaluation) a rate of 0.89 is compatible with 0.57.
      top1: the top segment is leave-one-out's in at least 4 prompts of 5: the top of the list is what a user
        reads first and acts on, and exact leave-one-out will say when it moves.
      top3: on average at least two of leave-one-out's top three among the first map's top three (issue 42's own
        goal for a fast faithful map: "shares at least two of exact leave-one-out's top three").
      beat_gradient: also no worse than the gradient (already on screen, no extra cost) on every figure
        (Spearman, top-1, top-3): a map that ranks worse than the one shown would replace it for the worse.
    """

    min_n: int = 50
    top1: float = 0.8
    top3: float = 2 / 3
    beat_gradient: bool = True

    def passes(self, fig: Agreement, gradient: Agreement | None) -> bool:
        """Whether a method with figures `fig` is good enough; `gradient`: the gradient's figures (None: unknown,
        only the absolute bar applies)."""
        if fig.n < self.min_n or fig.top1 < self.top1 or fig.top3 < self.top3:
            return False
        if self.beat_gradient and gradient is not None:
            return no_worse(fig, gradient)
        return True


def no_worse(fig: Agreement, gradient: Agreement) -> bool:
    """Whether figures `fig` are no worse than the gradient's on every figure (top-1, top-3, Spearman)."""
    return fig.top1 >= gradient.top1 and fig.top3 >= gradient.top3 and fig.spearman >= gradient.spearman


FIRST_MAP_BAR = AgreementBar()


@dataclasses.dataclass(frozen=True)
class AgreementFile:
    """The held-out figures: where they come from (`source`) and, per granularity, per method, `Agreement`."""

    source: str
    granularities: dict[str, dict[str, Agreement]]


def choose_first_maps(agreement: Mapping[str, Mapping[str, Agreement]], costs: Mapping[str, float], *,
                      reference: str, gradient: str, bar: AgreementBar = FIRST_MAP_BAR,
                      granularities: tuple[str, ...] = FIRST_MAP_GRANULARITIES) -> dict[str, str | None]:
    """The first map's method per granularity: None where the gradient stays the first map.

    At each of `granularities`, the candidates are the methods with figures there and a cost (`costs`: forwards
    at a typical prompt, any unit as long as it is one) below the `reference`'s (exact leave-one-out, which
    confirms the first map: a method costing as much is no head start), other than the reference and the
    `gradient`. The first map is the cheapest candidate that `bar` passes against the gradient's figures at that
    granularity (equal costs: the earlier in `costs`' order); None when none passes or the granularity has no
    figures.
    """
    order = {name: i for i, name in enumerate(costs)}
    out: dict[str, str | None] = {}
    for g in granularities:
        figures = agreement.get(g, {})
        ceiling = costs.get(reference, math.inf)
        passing = [m for m, fig in figures.items()
                   if m not in (reference, gradient) and m in costs and costs[m] < ceiling
                   and bar.passes(fig, figures.get(gradient))]
        out[g] = min(passing, key=lambda m: (costs[m], order[m])) if passing else None
    return out


def choose_first_looks(agreement: Mapping[str, Mapping[str, Agreement]], first_maps: Mapping[str, str | None],
                       looks: Mapping[str, str | None], *, gradient: str) -> dict[str, str | None]:
    """Where the first map's job shows its first look before its own values (issue 42, session 37): {granularity:
    the first look's method, or None}.

    `first_maps`: choose_first_maps' answer; `looks`: {method: its record's first_look or None} (attention_verified:
    attention_attribution, the estimate it starts from, there as soon as the first highlight's pass recorded the
    attention). A first look replaces the gradient on screen (the first highlight), so it is shown only where its
    held-out figures are no worse than the gradient's on every figure (`no_worse`, the bar's `beat_gradient` reason: a
    map that ranks worse than the one shown would replace it for the worse); it need not clear the bar's absolute
    rates, since it is named as the estimate being verified, not as the first map. With the figures shipped in
    session 37: at sentence only (top-1 0.80, top-3 0.53, Spearman 0.19 against the gradient's 0.22, 0.52, 0.06; at
    line its top-3 is 0.569 against 0.575, at paragraph 0.45 against 0.61).
    """
    out: dict[str, str | None] = {}
    for g, method in first_maps.items():
        look = looks.get(method) if method is not None else None
        figures = agreement.get(g, {})
        fig, grad = figures.get(look) if look is not None else None, figures.get(gradient)
        out[g] = look if fig is not None and grad is not None and no_worse(fig, grad) else None
    return out


def _fail(path: pathlib.Path, what: str) -> SalienceError:
    return SalienceError(f"{path}: {what}. Fix: write it with the schema of sequence_salience/first_map.py "
                         '({"source": str, "granularities": {"sentence": {"<method>": {"n": int, "spearman": float, '
                         '"top1": float, "top3": float}}}}), as the held-out evaluation does.')


def parse_agreement(data: object, path: pathlib.Path = AGREEMENT_FILE) -> AgreementFile:
    """The figures of a loaded JSON object; SalienceError naming the entry that breaks the schema."""
    if not isinstance(data, dict) or not isinstance(data.get("source"), str) or not isinstance(
            data.get("granularities"), dict):
        raise _fail(path, 'no string "source" and object "granularities"')
    out: dict[str, dict[str, Agreement]] = {}
    for g, methods in data["granularities"].items():
        if not isinstance(methods, dict):
            raise _fail(path, f"granularities.{g} is not an object")
        out[g] = {}
        for m, fig in methods.items():
            if not isinstance(fig, dict) or set(fig) != {"n", "spearman", "top1", "top3"}:
                raise _fail(path, f"granularities.{g}.{m} does not have exactly n, spearman, top1, top3")
            if not isinstance(fig["n"], int) or fig["n"] < 1:
                raise _fail(path, f"granularities.{g}.{m}.n is not a positive integer")
            rates = {k: fig[k] for k in ("spearman", "top1", "top3")}
            if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in rates.values()):
                raise _fail(path, f"granularities.{g}.{m} has a figure that is not a number")
            if not (0 <= rates["top1"] <= 1 and 0 <= rates["top3"] <= 1 and -1 <= rates["spearman"] <= 1):
                raise _fail(path, f"granularities.{g}.{m} has a figure out of range (top1, top3 in [0, 1]; "
                                  "spearman in [-1, 1])")
            out[g][m] = Agreement(n=fig["n"], **{k: float(v) for k, v in rates.items()})
    return AgreementFile(source=data["source"], granularities=out)


def load_agreement(path: pathlib.Path | str = AGREEMENT_FILE) -> AgreementFile:
    """The figures in `path` (default: the shipped `AGREEMENT_FILE`)."""
    path = pathlib.Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise _fail(path, f"cannot be read as JSON ({e})") from None
    return parse_agreement(data, path)


def method_costs(segments: int = TYPICAL_SEGMENTS) -> dict[str, float]:
    """Forwards of each segment method on a prompt of `segments` segments (its record's `rows` at the default
    settings, plus the unedited prompt's), in the registry's display order; the gradient's first highlight is
    not among them (it is on screen before any of them starts)."""
    from sequence_salience.methods import AblationConfig, get_segment_method, list_segment_methods

    config = AblationConfig()
    return {name: float(get_segment_method(name).rows(segments, config) + 1) for name in list_segment_methods()}


def first_map_methods(path: pathlib.Path | str = AGREEMENT_FILE) -> dict[str, str | None]:
    """The rule applied to the shipped figures and the registry's methods: {granularity: method or None (the
    gradient)} for `FIRST_MAP_GRANULARITIES`."""
    from sequence_salience.methods import DEFAULT_METHODS, leave_one_out

    return choose_first_maps(load_agreement(path).granularities, method_costs(), reference=leave_one_out.NAME,
                             gradient=DEFAULT_METHODS[0])


def first_look_methods(path: pathlib.Path | str = AGREEMENT_FILE) -> dict[str, str | None]:
    """`choose_first_looks` on the shipped figures and the registry's records: {granularity: the first look's method or
    None} for `FIRST_MAP_GRANULARITIES`."""
    from sequence_salience.methods import DEFAULT_METHODS, get_segment_method

    firsts = first_map_methods(path)
    looks = {m: get_segment_method(m).first_look for m in firsts.values() if m is not None}
    return choose_first_looks(load_agreement(path).granularities, firsts, looks, gradient=DEFAULT_METHODS[0])
