"""Explanation tests on the default model (SmolLM2-135M-Instruct).

A fact hidden among distractor sentences: removing the sentence the salience map ranks
first must lower log p(answer) more than removing a random sentence (the mean over all
other sentences, i.e. the expectation of a uniformly random pick). The numbers are printed.
"""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import explain as ex

FACTS = (
    "The museum opens at nine on weekdays. The bakery on Main Street sells rye bread. "
    "Maria's cat is named Pepper. The train to Oslo leaves from platform four. "
    "The library closes early on Sundays. Tom planted tomatoes in his garden."
)
QUESTION = "What is the name of Maria's cat? Answer with the name only."
ANSWER = "Pepper"


@pytest.fixture(scope="module")
def case(default_lm):
    chat = default_lm.format_prompt(f"{FACTS}\n{QUESTION}")
    user = next((s, e) for s, e, r in chat.role_spans if r == "user")
    return chat, user


@pytest.mark.parametrize("method", ["grad_norm", "grad_x_input"])
def test_deleting_the_top_salience_sentence_hurts_more_than_a_random_one(default_lm, case, method):
    chat, user = case
    span_result = ss.compute_span_result(default_lm, chat, ANSWER, methods=(method,))
    segs = ex.prompt_segments(span_result, "sentence", regions=[user])
    texts = segs.texts(span_result.text)
    facts = [k for k, t in enumerate(texts) if t.strip() and t.strip()[0].isupper() and "?" not in t
             and not t.strip().startswith("Answer")]
    assert len(facts) == 6, texts
    scores = segs.scores(span_result.span_salience(method))  # [S]
    top = max(facts, key=lambda k: scores[k])
    prompt_ids = np.asarray(span_result.ids[:span_result.n_prompt_tokens])
    target = tuple(int(i) for i in span_result.ids[span_result.n_prompt_tokens:])
    space = default_lm.tokenize(" ").ids[0]

    def without(k):
        ids = prompt_ids.copy()
        ids[segs.tokens[k]] = space
        return tuple(int(i) for i in ids)

    lps = ex.score(default_lm, [tuple(int(i) for i in prompt_ids)] + [without(k) for k in facts], target,
                   (0, len(target)))
    drops = {k: float(lps[0] - lp) for k, lp in zip(facts, lps[1:])}
    random_drop = float(np.mean([d for k, d in drops.items() if k != top]))
    rng_pick = int(np.random.default_rng(0).choice([k for k in facts if k != top]))
    print(f"\n{method}: log p({ANSWER!r}) = {lps[0]:.3f}; top sentence {texts[top].strip()!r} "
          f"(salience {scores[top]:.3f}) drop {drops[top]:.3f}; mean drop of the other sentences {random_drop:.3f}; "
          f"seeded random pick {texts[rng_pick].strip()!r} drop {drops[rng_pick]:.3f}")
    for k in facts:
        print(f"   {scores[k]:9.4f}  drop {drops[k]:7.3f}  {texts[k].strip()}")
    assert drops[top] > random_drop


def test_curves_on_the_default_model_start_at_the_unmodified_logprob(default_lm, case):
    chat, user = case
    rep = ex.faithfulness_curves(default_lm, ex.CurvesRequest(chat, ANSWER, ("grad_norm",),
                                                  config=ex.FaithfulnessConfig(steps=3, n_random=2, modes=("deletion",),
                                                                               regions=(user,))))
    full = ss.compute_salience(default_lm, chat, ANSWER, methods=("grad_norm",))
    assert rep.curves["deletion"]["grad_norm"].logprobs[0] == pytest.approx(float(full.target_logprobs.sum()), abs=1e-4)
    print(f"\nAOPC grad_norm {rep.aopc('grad_norm'):.3f} vs random {rep.aopc('random'):.3f} "
          f"(gap {rep.gap('grad_norm'):+.3f}); {len(rep.segments)} sentences")
