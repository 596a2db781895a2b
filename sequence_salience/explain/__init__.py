"""Testing an explanation: is the salience map faithful, and what does acting on it change?

One module per feature, all over the public salience API (never LIT):

* faithfulness.py  deletion / insertion curves and AOPC per method vs. seeded random orders
* upper_bound.py   the best order the curves test can find (exact or greedy): when it is undecidable
* reduction.py     input reduction: the smallest prompt that keeps the response
* flips.py         gradient-guided single-token flips (HotFlip for causal LMs), verified exactly
* contrastive.py   salience of log p(target) - log p(foil)
* ig_quality.py    integrated gradients with as many steps as completeness needs
* scoring.py       shared plumbing: removable prompt segments, batched scoring, budgets

Segments come from `sequence_salience.aggregate` at any granularity.
"""

from sequence_salience.explain.contrastive import ContrastiveResult, contrastive_salience, contrastive_units
from sequence_salience.explain.faithfulness import (
    Curve,
    CurvesRequest,
    FaithfulnessConfig,
    FaithfulnessReport,
    coarse_config,
    faithfulness_curves,
    faithfulness_stages,
)
from sequence_salience.explain.flips import Flip, FlipReport, token_flips, word_end_probability, word_vocabulary
from sequence_salience.explain.ig_quality import IGQuality, IGStep, ig_auto_steps, step_schedule
from sequence_salience.explain.reduction import ReductionConfig, ReductionResult, reduce_prompt
from sequence_salience.scoring import PromptSegments, prompt_segments, score, score_greedy

__all__ = [
    "ContrastiveResult",
    "Curve",
    "CurvesRequest",
    "FaithfulnessConfig",
    "FaithfulnessReport",
    "Flip",
    "FlipReport",
    "IGQuality",
    "IGStep",
    "PromptSegments",
    "ReductionConfig",
    "ReductionResult",
    "contrastive_salience",
    "contrastive_units",
    "coarse_config",
    "faithfulness_curves",
    "faithfulness_stages",
    "ig_auto_steps",
    "prompt_segments",
    "reduce_prompt",
    "score",
    "score_greedy",
    "step_schedule",
    "token_flips",
    "word_end_probability",
    "word_vocabulary",
]
