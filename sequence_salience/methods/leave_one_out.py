"""Leave one segment out: log p(target) - log p(target | segment removed), one ablation per segment.

The occlusion test of Zeiler & Fergus (2014, https://arxiv.org/abs/1311.2901) at the granularity on
screen, as ContextCite's leave-one-out baseline and TracLLM use it for LLM prompts. Signed: positive
when removing the segment lowers the probability of the target (the segment supports it). Its values
live on the segmentation; computed by forward passes only (sequence_salience/ablation: batched,
reusing the keys and values of each ablation's unchanged prefix). Segments whose value an earlier exact
measurement of the same ablation already holds (SegmentProblem.known: the first map's verified segments,
attention_verified) are not scored again: their values and log-probs come from it, so the result is the same.
"""

from __future__ import annotations

import numpy as np

from sequence_salience.methods.base import AblationConfig, SegmentMethod, SegmentOutput, SegmentProblem


def rows(n_segments: int, config: AblationConfig, known: int = 0) -> int:
    """Ablated prompts scored: one per segment whose value is not `known` (SegmentProblem.known: the first map's
    verified segments; the unedited prompt is scored once beside them)."""
    return max(0, n_segments - known)


def compute(problem: SegmentProblem, config: AblationConfig) -> SegmentOutput:
    S = problem.n_segments
    todo = [s for s in range(S) if s not in problem.known]
    logp = np.empty(S, dtype=np.float64)  # [S]
    for s, v in problem.known.items():
        logp[s] = problem.original_logprob - float(v)
    if todo:
        logp[todo] = np.asarray(problem.score([problem.edit((s,)) for s in todo]), dtype=np.float64)  # [len(todo)]
    kept = ~np.eye(S, dtype=bool)  # [S, S] row s keeps every segment but s
    # "reused": how many values came from the earlier exact measurement (the status line counts only what ran)
    quality = {"reused": float(len(problem.known))} if problem.known else {}
    return SegmentOutput(values=problem.original_logprob - logp, kept=kept, logprobs=logp, quality=quality)


NAME = "leave_one_out"

METHOD = SegmentMethod(
    name=NAME, label="Leave one segment out", short="Leave-one-out", menu="Leave one out", signed=True, compute=compute,
    rows=rows, paper="https://arxiv.org/abs/1311.2901", exact_measured=True,
    cost_unit="one forward per segment (from the segment on, over the cached prefix)",
    trust="The exact effect of removing each segment alone, the reference the other maps are checked against; it "
          "misses what only matters together (two segments saying the same thing each look unimportant).",
)
