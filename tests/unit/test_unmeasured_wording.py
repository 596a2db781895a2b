"""How an unmeasured segment's value is worded: one rule in the core (methods/base.py), the same in the browser.

coarse_to_fine marks an unmeasured segment with the coarser unit that did not matter; attention_verified marks an
unverified one with ESTIMATE_MARK (its value is the estimator's, not a unit's). The wording must say which, in the
CLI's and display's summary lines (unmeasured_origin) and in the notes (unmeasured_note); the browser's
frontend/src/salience/coarse.ts reads the same mark (its ESTIMATE_MARK equals the core's).
"""

from __future__ import annotations

import pathlib
import re

from sequence_salience.methods import attention_verified
from sequence_salience.methods.base import ESTIMATE_MARK, unmeasured_note, unmeasured_origin

COARSE_TS = pathlib.Path(__file__).resolve().parents[2] / "frontend" / "src" / "salience" / "coarse.ts"


def test_a_unit_mark_says_the_unit_did_not_matter_and_an_estimate_says_estimated():
    assert unmeasured_note("sentence", 0.0123) == "inside a sentence that did not matter (coarse value 0.0123)"
    assert unmeasured_note(ESTIMATE_MARK, -0.5) == "estimated, not measured (estimate -0.5)"
    assert "did not matter" not in unmeasured_note(ESTIMATE_MARK, 1.0)


def test_the_summary_names_each_origin_once():
    assert unmeasured_origin(["", "sentence", "paragraph", "sentence"]) == (
        "inside a paragraph or sentence that did not matter (its coarse value shared among its parts)")
    assert unmeasured_origin(["", ESTIMATE_MARK, ESTIMATE_MARK]) == "estimated, not measured"
    assert unmeasured_origin(["sentence", ESTIMATE_MARK]) == (
        "inside a sentence that did not matter (its coarse value shared among its parts); estimated, not measured")
    assert unmeasured_origin(["", ""]) == ""


def test_attention_verified_marks_with_the_core_mark_and_the_browser_reads_the_same_one():
    assert attention_verified.ESTIMATE == ESTIMATE_MARK
    ts = COARSE_TS.read_text("utf-8")
    m = re.search(r"export const ESTIMATE_MARK = '([^']*)';", ts)
    assert m is not None and m.group(1) == ESTIMATE_MARK
