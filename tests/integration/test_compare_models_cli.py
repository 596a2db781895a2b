"""`sequence-salience compare --model default --model-b <folder>`: two models on one prompt, offline.

Model B is a tiny random Llama over the default model's tokenizer (tests/unit/tiny_models.py); each
answer's log p under the other model is checked against a plain teacher-forced forward of that model.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import torch

import sequence_salience as ss
from sequence_salience.result import result_from_dict
from tests.server_process import REPO
from tests.unit.tiny_models import save_tiny_llama_for

PROMPT = "Alice has 3 apples and Bob gives her 2 more. How many apples does Alice have?"


def _teacher_forced(lm, prompt_ids, target_ids) -> list[float]:
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([list(prompt_ids) + list(target_ids)])).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    p = len(prompt_ids)
    return [logp[p + t - 1, tid].item() for t, tid in enumerate(target_ids)]


def test_compare_two_models_on_one_prompt(tmp_path, default_lm):
    folder = save_tiny_llama_for(default_lm.tokenizer, tmp_path / "tiny")
    out_json, out_html = tmp_path / "m.json", tmp_path / "m.html"
    proc = subprocess.run([sys.executable, "-m", "sequence_salience.cli", "compare", "--model", "default",
                           "--model-b", folder, "--label-a", "smollm2", "--label-b", "tiny", "--prompt-a", PROMPT,
                           "--max-new-tokens", "6", "--json", str(out_json), "--html", str(out_html)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(out_json.read_text(encoding="utf-8"))
    assert obj["format"] == "sequence_salience.ModelComparison" and obj["labels"] == ["smollm2", "tiny"]
    assert obj["same_tokenizer"] is True
    a, b = result_from_dict(obj["result_a"]), result_from_dict(obj["result_b"])
    assert a.text[:a.prompt_end] == b.text[:b.prompt_end]  # the same template, so one aligned prompt
    assert all(s["kind"] == "equal" for s in obj["prompts"]["segments"])
    tiny = ss.load_model(folder)
    ans_a, ans_b = a.ids[a.n_prompt_tokens:], b.ids[b.n_prompt_tokens:]
    prompt_ids = a.ids[:a.n_prompt_tokens]
    np.testing.assert_allclose(obj["cross_a"]["under_b"]["logprobs"], _teacher_forced(tiny, prompt_ids, ans_a),
                               atol=1e-4)
    np.testing.assert_allclose(obj["cross_b"]["under_a"]["logprobs"],
                               _teacher_forced(default_lm, prompt_ids, ans_b), atol=1e-3)
    np.testing.assert_allclose(obj["cross_a"]["under_a"]["logprobs"], a.target_logprobs, atol=1e-6)
    page = out_html.read_text(encoding="utf-8")
    assert "Each answer under both models" in page and "ss-view-difference" in page
    assert f"under smollm2 = {obj['cross_b']['under_a']['total']:.3f}" in proc.stdout
    # One prompt only: a second one is refused in one line naming the flags.
    bad = subprocess.run([sys.executable, "-m", "sequence_salience.cli", "compare", "--model-b", folder,
                          "--prompt-a", "x", "--prompt-b", "y"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert bad.returncode == 2 and "--prompt-b" in bad.stderr
