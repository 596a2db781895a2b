"""align_texts (sequence_salience/compare/alignment.py) on the cases shared with the browser.

tests/data/alignment_cases.json is read here and by frontend/test/alignment_cases.test.ts
(frontend/src/salience/compare/alignment.ts alignTexts), so both languages align two prompts alike.
"""

from __future__ import annotations

import difflib
import json
import pathlib
import random
import shutil
import subprocess

import numpy as np
import pytest

from sequence_salience.compare import align_texts, aligned_values, difference

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "tests/data/alignment_cases.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in DATA["cases"]])
def test_shared_alignment_case(case):
    al = align_texts(case["a"], case["b"], case["granularity"])
    rows = [[s.kind, al.text(k, "a").strip(), al.text(k, "b").strip()] for k, s in enumerate(al.segments)]
    assert rows == case["rows"]
    for k, a, b in case.get("spans", []):
        assert [list(al.segments[k].a), list(al.segments[k].b)] == [a, b]
    for k, n_a, n_b in case.get("segment_counts", []):
        assert (len(al.segments[k].a_segments), len(al.segments[k].b_segments)) == (n_a, n_b)
    if "values" in case:
        v = {k: [np.nan if x is None else x for x in xs] for k, xs in case["values"].items()}
        va, vb = aligned_values(al, v["a"], v["b"])
        np.testing.assert_array_equal(va, v["aligned_a"])
        np.testing.assert_array_equal(vb, v["aligned_b"])
        np.testing.assert_array_equal(difference(al, va, vb), v["difference"])
    # Spans tile each text in order: every aligned segment starts where the one before ended, or later.
    for side, text in (("a", al.text_a), ("b", al.text_b)):
        pos = 0
        for seg in al.segments:
            s, e = seg.a if side == "a" else seg.b
            assert 0 <= pos <= s <= e <= len(text)
            pos = e


def test_the_browser_diff_equals_difflib_on_seeded_key_lists(tmp_path):
    """diffKeys (frontend/src/salience/compare/alignment.ts, run by node) against difflib itself on 400 seeded pairs of
    key lists over small alphabets, where runs, repeats and ties are common."""
    node = shutil.which("node")
    esbuild = ROOT / "frontend" / "node_modules" / ".bin" / "esbuild"
    assert node and esbuild.exists(), "node and frontend/node_modules are needed (make setup installs them)"
    bundle = tmp_path / "logic.mjs"
    subprocess.run([str(esbuild), str(ROOT / "frontend" / "src" / "salience" / "compare" / "alignment.ts"), "--bundle", "--format=esm",
                    f"--outfile={bundle}", "--log-level=warning"], check=True)
    rng = random.Random(0)
    pairs = []
    for _ in range(400):
        alphabet = "abcdefgh"[: rng.randint(1, 8)]
        pairs.append([[rng.choice(alphabet) for _ in range(rng.randint(0, 14))] for _ in range(2)])
    out = subprocess.run([node, str(ROOT / "tests" / "unit" / "diff_oracle.mjs"), str(bundle)],
                         input=json.dumps(pairs), capture_output=True, text=True, check=True)
    want = [[list(op) for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()] for a, b in pairs]
    assert json.loads(out.stdout) == want
