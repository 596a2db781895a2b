"""Compare two salience results: an edited prompt against the original (`compare`), or any two
results (`compare_results`; two models on one prompt reuse it).

    alignment.py  segment-level alignment of two texts (equal / insert / delete / replace, char spans)
    cross.py      teacher-forced log p of a given response under a prompt (one forward)
    comparison.py SalienceComparison: both results, aligned values on one scale, difference, cross log-probs;
                  its JSON and HTML (notebooks, files)
    compare.py    compare / compare_results: what builds one
    models.py     two models on one prompt (compare_models -> ModelComparison): the same pieces, plus
                  each model's log p of the other's answer

Core library: never imports LIT.
"""

from sequence_salience.compare.alignment import (
    KINDS,
    TEXT_GRANULARITIES,
    AlignedSegment,
    Alignment,
    align_segmentations,
    align_texts,
    aligned_values,
    difference,
    segment_key,
)
from sequence_salience.compare.compare import DEFAULT_METHOD, compare, compare_results
from sequence_salience.compare.comparison import SalienceComparison
from sequence_salience.compare.cross import CrossLogprobs, TokenLogprobs, response_logprobs
from sequence_salience.compare.models import ModelComparison, compare_models

__all__ = [
    "DEFAULT_METHOD", "KINDS", "TEXT_GRANULARITIES", "AlignedSegment", "Alignment", "CrossLogprobs",
    "ModelComparison", "SalienceComparison", "TokenLogprobs", "align_segmentations", "align_texts", "aligned_values", "compare",
    "compare_models", "compare_results", "difference", "response_logprobs", "segment_key",
]
