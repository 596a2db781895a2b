"""Which salience method is faithful on your model: evaluate methods over a batch of prompts.

* engine.py   evaluate_row: faithfulness curves of every method vs. the library's baselines for
              one row (+ optional input-reduction size and IG completeness), as JSON-able data
* summary.py  summarize: per method and baseline, mean AOPC gap, bootstrap CI, win rate, verdict;
              paired comparisons with a reference method; rows the test cannot decide
* report.py   render_report: a self-contained HTML report (inline PNG plots)
* runner.py   run_serial / run_ray: rows on one process, or on Ray actors (optional extra)
* validate.py check_evaluation: a saved row (resume file) checked field by field before reuse

The command line is `sequence-salience evaluate --batch prompts.jsonl --out DIR [--ray]`.
"""

from sequence_salience.evaluate.engine import EvalConfig, RowEvaluation, evaluate_row
from sequence_salience.evaluate.report import render_report
from sequence_salience.evaluate.runner import ModelSpec, Outcome, RowWorker, ray_available, run_ray, run_serial
from sequence_salience.evaluate.summary import SummaryConfig, pairs_table, summarize, summary_lines, table
from sequence_salience.evaluate.validate import check_evaluation

__all__ = [
    "EvalConfig",
    "ModelSpec",
    "Outcome",
    "RowEvaluation",
    "RowWorker",
    "SummaryConfig",
    "check_evaluation",
    "evaluate_row",
    "ray_available",
    "render_report",
    "run_ray",
    "run_serial",
    "pairs_table",
    "summarize",
    "summary_lines",
    "table",
]
