"""Segment methods in practice: removing prompt segments and re-scoring the target, forwards only.

The registry records (methods/leave_one_out.py, methods/ablation_surrogate.py) hold each method's
facts and its maths over a `SegmentProblem`; this room prepares that problem (segments, edits) and
scores the edited prompts fast (prefix.py: batched, from each ablation's first changed token on).
"""

from sequence_salience.ablation.engine import (SegmentSalience, fit_warning, removable_segments, segment_salience,
                                               span_recorder)
from sequence_salience.ablation.prefix import Cost, PrefixScorer, PrefixStats, common_prefix, costed
from sequence_salience.methods.base import AblationConfig

__all__ = ["AblationConfig", "Cost", "PrefixScorer", "PrefixStats", "SegmentSalience", "common_prefix", "costed",
           "fit_warning", "removable_segments", "segment_salience", "span_recorder"]
