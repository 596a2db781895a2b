"""A toy counted token method and a toy counted segment method in one module, for
tests/unit/test_method_one_file.py: nothing else names them.

Scaled gradient x input: toy_scale * (d log p(target_t) / d x_i) . x_i, computed from the call's one shared
backward, so its values are exactly toy_scale times grad_x_input's (the hand-derived reference). Its count
`toy_draws` changes nothing in the values (a count the edges must carry, range 1 to 12); its settings add
`toy_scale` with a CLI flag of its own, and a result extra `toy_total` (each target token's row sum) that the
server's payload carries under the key "toy_total".

The segment method `toy_repeated_loo` is leave one segment out scored `toy_rounds` times and averaged (each
round the same ablations), so its values are exactly leave_one_out's (the reference); its count `toy_rounds`
(range 1 to 9) multiplies the rows it scores.

Not registered on import: `register()` adds both to the library's registry (methods.register).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from sequence_salience.errors import SalienceError
from sequence_salience.field_rules import FieldRule
from sequence_salience.methods import register as register_method
from sequence_salience.methods import shared
from sequence_salience.methods.base import (AblationConfig, MethodContext, MethodOutput, ModelInputs, ResultExtra,
                                            SalienceConfig, SalienceMethod, SegmentMethod, SegmentOutput,
                                            SegmentProblem)
from sequence_salience.methods.gradients import weighted_gradient

NAME = "toy_scaled_gradient"
DRAWS = FieldRule("toy_draws", int, 3, 1, 12, "toy method: draws (changes nothing)")
SCALE_FLAG = "--toy-scale"
TOTAL = "toy_total"


@dataclasses.dataclass(frozen=True)
class Settings:
    """toy_draws: the count (DRAWS); toy_scale: the factor on gradient x input."""

    toy_draws: int = DRAWS.default
    toy_scale: float = dataclasses.field(default=2.0, metadata={"flag": SCALE_FLAG, "type": float, "metavar": "X",
                                                                "help": "toy method: the factor on gradient x input"})


def compute(inputs: ModelInputs, config: SalienceConfig, context: MethodContext) -> MethodOutput:
    _, grads = shared.target_gradients(inputs, config, context)  # [T, B, L, D]
    matrix = config.toy_scale * (grads * inputs.embeds.float()[None]).sum(-1).permute(1, 0, 2)  # [B, T, L]
    return MethodOutput(matrix=matrix.cpu().numpy(), extras={"total": matrix.sum(-1).cpu().numpy()})  # [B, T]


def compute_span(inputs: ModelInputs, target_weights: torch.Tensor, config: SalienceConfig,
                 progress=None) -> np.ndarray:
    _, g = weighted_gradient(inputs, inputs.embeds, target_weights)  # [B, L, D]
    return (config.toy_scale * (g * inputs.embeds.float()).sum(-1)).cpu().numpy()  # [B, L]


METHOD = SalienceMethod(
    name=NAME, label="Toy scaled gradient", short="Toy", signed=True, linear=True, compute=compute,
    compute_span=compute_span, paper="https://example.org/toy", cost_unit="one backward per target (shared)",
    trust="A toy: never.",
    count=DRAWS, count_unit="samples", settings=Settings,
    result_extras=(ResultExtra(TOTAL, "total", "T", "row sum per target token", payload=TOTAL),),
)


SEGMENT_NAME = "toy_repeated_loo"
ROUNDS = FieldRule("toy_rounds", int, 2, 1, 9, "toy segment method: rounds of leave one out (each the same)")


def check_label(label: str | None) -> None:
    """The toy's check of its flagged setting: "bad" is refused, with the fix."""
    if label == "bad":
        raise SalienceError("the toy label 'bad' is refused. Fix: use another label.")


@dataclasses.dataclass(frozen=True)
class SegmentSettings:
    """toy_rounds: the count (ROUNDS); toy_label: a flagged setting (a CLI and a server flag) with a check."""

    toy_rounds: int = ROUNDS.default
    toy_label: str | None = dataclasses.field(default=None, metadata={"flag": "--toy-label", "check": check_label,
                                                                      "help": "toy segment method: a label"})


def segment_rows(n_segments: int, config: AblationConfig) -> int:
    return n_segments * config.toy_rounds


def segment_compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    S, rounds = problem.n_segments, config.toy_rounds
    logp = problem.score([problem.edit((s,)) for s in range(S)] * rounds)  # [rounds * S]
    kept = np.tile(~np.eye(S, dtype=bool), (rounds, 1))  # [rounds * S, S]
    values = problem.original_logprob - logp.reshape(rounds, S).mean(0)  # [S]
    return SegmentOutput(values=values, kept=kept, logprobs=logp)


SEGMENT_METHOD = SegmentMethod(
    name=SEGMENT_NAME, label="Toy repeated leave one out", short="Toy LOO", signed=True, compute=segment_compute,
    rows=segment_rows, paper="https://example.org/toy", cost_unit="rounds x one forward per segment", trust="A toy: never.",
    count=ROUNDS, count_unit="rounds", settings=SegmentSettings,
)


def register() -> None:
    register_method(METHOD)
    register_method(SEGMENT_METHOD)
