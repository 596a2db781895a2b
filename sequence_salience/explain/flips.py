"""Gradient-guided token flips: HotFlip (Ebrahimi et al. 2018, https://arxiv.org/abs/1712.06751) for causal LMs.

Which single-token substitution in the prompt changes log p(target span) most? With g_i
the gradient of log p(span) at prompt token i's embedding e_i, swapping token i for
vocabulary token v changes it by about

    delta(i, v) ~= g_i . (E[v] - e_i)          (first order; one backward for all i, v)

so one [P, V] matrix product ranks every substitution. The `n_verify` best estimates are
then re-scored exactly with batched forward passes, which also tell whether the target is
still the greedy response (teacher forcing, see scoring.score_greedy).

Candidates are words only: a position is flipped only when its token decodes to a word
(letters or digits, optionally after one leading space) and is a whole word of the prompt
(no letter or digit right before or after it), and it is replaced only by word tokens with
the same leading-space form; never special tokens, byte pieces, word pieces or punctuation.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from sequence_salience.errors import SalienceError
from sequence_salience.explain import scoring
from sequence_salience.explain.scoring import Cancel, Progress
from sequence_salience.methods.gradients import weighted_gradient
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.salience import build_inputs
from sequence_salience.text import ChatPrompt

DIRECTIONS = ("decrease", "increase")
_VOCAB_CACHE: dict[int, tuple[object, np.ndarray, np.ndarray, list[str]]] = {}


def word_vocabulary(tokenizer, size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Which of the first `size` ids decode to words.

    Returns:
      is_word: <bool>[size]; leading_space: <bool>[size]; texts: decoded text of each id.
    """
    key = id(tokenizer)
    cached = _VOCAB_CACHE.get(key)
    if cached is not None and cached[0] is tokenizer and len(cached[1]) == size:
        return cached[1], cached[2], cached[3]
    n_tok = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(min(size, n_tok))], clean_up_tokenization_spaces=False)
    texts += [""] * (size - len(texts))
    special = set(tokenizer.all_special_ids)
    is_word = np.zeros(size, dtype=bool)
    lead = np.zeros(size, dtype=bool)
    for i, t in enumerate(texts):
        if i in special or not t or "\ufffd" in t:
            continue
        core = t[1:] if t[0] == " " else t
        is_word[i] = bool(core) and core.isalnum()
        lead[i] = t[0] == " "
    _VOCAB_CACHE[key] = (tokenizer, is_word, lead, texts)
    return is_word, lead, texts


@dataclasses.dataclass(frozen=True)
class Flip:
    """One verified substitution of prompt token `position` (old_id -> new_id).

    Attributes:
      char_span: (start, end) of the replaced text in the prompt text.
      old_text, new_text: the replaced text and its replacement (as it appears in edited_text).
      estimated_delta: the first-order estimate; delta: the exact change of log p(target span)
        (new log-prob minus the original), logprob: the new log-prob.
      keeps_greedy: the target is still the greedy response after the flip (with the stop
        token when the original had one).
      edited_text: the prompt text with the substitution.
    """

    position: int
    old_id: int
    new_id: int
    char_span: tuple[int, int]
    old_text: str
    new_text: str
    estimated_delta: float
    delta: float
    logprob: float
    keeps_greedy: bool
    edited_text: str


@dataclasses.dataclass(frozen=True)
class FlipReport:
    """Flips sorted by effect (most negative delta first for "decrease", most positive for "increase").

    original_keeps_greedy: whether the target is the greedy response before any flip.
    n_positions, n_vocabulary: candidate positions and replacement tokens ranked.
    """

    prompt_text: str
    span: tuple[int, int]
    direction: str
    original_logprob: float
    original_keeps_greedy: bool
    flips: tuple[Flip, ...]
    n_positions: int
    n_vocabulary: int
    n_verified: int


def _whole_words(text: str, offsets) -> np.ndarray:
    """<bool>[P]: the token is a whole word: no letter or digit touches its span on either side
    (so "ify" in "Classify" is not flipped, " Classify" as one token is)."""
    out = np.zeros(len(offsets), dtype=bool)
    for k, (s, e) in enumerate(offsets):
        if e <= s:
            continue
        starts_inside = s > 0 and text[s].isalnum() and text[s - 1].isalnum()
        ends_inside = e < len(text) and text[e].isalnum() and text[e - 1].isalnum()
        out[k] = not starts_inside and not ends_inside
    return out


def _replacement(text: str, span: tuple[int, int], old: str, new: str) -> tuple[str, str]:
    """(old text in the prompt, its replacement), keeping the prompt's own spacing."""
    here = text[span[0]:span[1]]
    if here == old:
        return here, new
    if old.startswith(" ") and here == old[1:]:  # offsets without the leading space
        return here, new[1:]
    return here, new.strip()


def token_flips(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation,
    *,
    span: tuple[int, int] | None = None,
    direction: str = "decrease",
    top_k: int = 10,
    n_verify: int = 64,
    per_position: int = 4,
    batch_size: int = scoring.DEFAULT_BATCH_SIZE,
    regions: scoring.Regions | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    slice_s: float | None = None,
) -> FlipReport:
    """Ranks single-token word substitutions by the gradient estimate, verifies the best exactly.

    Args:
      lm, prompt, target: as for compute_salience.
      span: (t0, t1) target tokens whose summed log-prob is attacked; None: the whole target.
      direction: "decrease" (flips that hurt the target) or "increase".
      top_k: flips returned; n_verify: estimates re-scored exactly (>= top_k);
      per_position: most candidates verified per prompt position (diversity).
      batch_size: edited prompts per forward pass.
      regions: optional character ranges of the prompt text; only tokens inside them are flipped.
      progress: progress("flips", verified, n_verify); cancel: () -> bool.
      slice_s: None, or seconds: verification batches of about this much model time (at most
        batch_size prompts; sequence_salience/slices.py); the scores do not depend on it.
    """
    if direction not in DIRECTIONS:
        raise SalienceError(f"Unknown direction {direction!r}. Fix: use one of {', '.join(DIRECTIONS)}.")
    if top_k < 1 or n_verify < top_k:
        raise SalienceError(f"top_k={top_k}, n_verify={n_verify}. Fix: use 1 <= top_k <= n_verify.")
    encoded = lm.encode_prompt(prompt)
    prompt_ids = tuple(encoded.ids)
    tgt = scoring.target_ids(lm, target)
    t0, t1 = scoring.resolve_span(span, len(tgt))
    P = len(prompt_ids)
    emb = lm.model.get_input_embeddings().weight  # [V, D]
    V = emb.shape[0]
    is_word, lead, texts = word_vocabulary(lm.tokenizer, V)
    ids_arr = np.asarray(prompt_ids)
    candidate = is_word[ids_arr] & ~np.asarray(encoded.special, dtype=bool)  # [P]
    candidate &= _whole_words(encoded.text, encoded.offsets)
    if regions is not None:
        offs = np.asarray(encoded.offsets, dtype=np.int64).reshape(-1, 2)
        inside = np.zeros(P, dtype=bool)
        for a, b in regions:
            inside |= (offs[:, 0] >= a) & (offs[:, 1] <= b)
        candidate &= inside
    positions = np.flatnonzero(candidate)  # [P']
    if len(positions) == 0:
        raise SalienceError("The prompt has no word tokens to flip. Fix: use a prompt with words.")

    scoring.check_cancel(cancel, "token flips")
    inputs = build_inputs(lm, [(prompt_ids, tgt)])
    weights = torch.zeros(1, len(tgt), device=lm.device)
    weights[0, t0:t1] = 1.0
    _, g = weighted_gradient(inputs, inputs.embeds, weights)  # [1, L, D]
    g = g[0, positions].double()  # [P', D]
    e = emb.detach().double()  # [V, D]
    with torch.no_grad():
        est = g @ e.T - (g * e[torch.as_tensor(ids_arr[positions])]).sum(-1, keepdim=True)  # [P', V]
    allowed = torch.as_tensor(is_word)[None, :] & (torch.as_tensor(lead)[None, :] ==
                                                   torch.as_tensor(lead[ids_arr[positions]])[:, None])
    allowed[torch.arange(len(positions)), torch.as_tensor(ids_arr[positions])] = False
    sign = -1.0 if direction == "decrease" else 1.0
    ranked = torch.where(allowed, sign * est, torch.tensor(-np.inf, dtype=est.dtype))  # larger = better
    k = min(per_position, int(allowed.sum(-1).max()))
    best_v, best_j = ranked.topk(max(1, k), dim=-1)  # [P', k]
    flat = best_v.flatten()
    order = torch.argsort(flat, descending=True)[:n_verify]
    picks = [(int(order_i) // best_j.shape[1], int(best_j.flatten()[order_i])) for order_i in order
             if torch.isfinite(flat[order_i])]

    edited = []
    for pi, v in picks:
        ids = list(prompt_ids)
        ids[int(positions[pi])] = v
        edited.append(ids)
    all_prompts = [list(prompt_ids)] + edited
    lps, greedy, stops = [], [], []
    for sl, measured in scoring.sliced_batches(len(all_prompts), batch_size, slice_s):
        scoring.check_cancel(cancel, "token flips")
        lp, gr, st = scoring.score_greedy(lm, all_prompts[sl], tgt, (t0, t1), sl.stop - sl.start)
        measured()
        lps.append(lp), greedy.append(gr), stops.append(st)
        if progress is not None:
            progress("flips", sl.stop - 1, len(edited))
    lp, greedy, stops = np.concatenate(lps), np.concatenate(greedy), np.concatenate(stops)
    needs_stop = bool(stops[0])
    keeps = greedy & (stops | (not needs_stop))
    original = float(lp[0])
    text = encoded.text
    flips = []
    for n, (pi, v) in enumerate(picks):
        pos = int(positions[pi])
        s, e_ = (int(x) for x in encoded.offsets[pos])
        old_text, new_text = _replacement(text, (s, e_), texts[prompt_ids[pos]], texts[v])
        flips.append(Flip(
            position=pos, old_id=int(prompt_ids[pos]), new_id=int(v), char_span=(s, e_), old_text=old_text,
            new_text=new_text, estimated_delta=float(est[pi, v]), delta=float(lp[n + 1] - original),
            logprob=float(lp[n + 1]), keeps_greedy=bool(keeps[n + 1]), edited_text=text[:s] + new_text + text[e_:],
        ))
    flips.sort(key=lambda f: sign * -f.delta)
    return FlipReport(
        prompt_text=text, span=(t0, t1), direction=direction, original_logprob=original,
        original_keeps_greedy=bool(keeps[0]), flips=tuple(flips[:top_k]), n_positions=len(positions),
        n_vocabulary=int(is_word.sum()), n_verified=len(picks),
    )
