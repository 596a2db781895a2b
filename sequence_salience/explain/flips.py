"""Gradient-guided token flips: HotFlip (Ebrahimi et al. 2018, https://arxiv.org/abs/1712.06751) for causal LMs.

Which single-token substitution in the prompt changes log p(target span) most? With g_i
the gradient of log p(span) at prompt token i's embedding e_i, swapping token i for
vocabulary token v changes it by about

    delta(i, v) ~= g_i . (E[v] - e_i)          (first order; one backward for all i, v)

so one [P, V] matrix product ranks every substitution: the estimate is the RANKING score
(`Flip.estimated_delta`). The `n_verify` best estimates are then checked exactly on what
*Load* produces: the edited prompt TEXT (the prompt with the old word's text replaced by the
new word's) re-tokenized, scored with batched forward passes, which also tell whether the
target is still the greedy response (teacher forcing, see scoring.score_greedy). So
`Flip.delta` and `Flip.keeps_greedy` are those of the loaded text, also when re-tokenizing
it gives other ids than the one-id edit (`Flip.retokenized` says when).

Whole words only (`word_vocabulary` + `word_end_probability`):
* a position is flipped only when its token is a word (letters only, or digits only,
  optionally after one leading space) and a whole word of the prompt (no letter or digit
  right before or after its text);
* a replacement token must have the same shape: the same leading-space form, letters for
  letters / digits for digits, the same case pattern (lower, Capitalized, UPPER; others are
  never used), not a special token, and it must be a complete word, not the first piece of a
  longer one (" traged", " WARRAN", " subsc"): the model itself, reading "Word:" and the
  token (after BOS when the tokenizer has one; "Word:\n" for a token without a leading space),
  must expect the word to END there: the probability that the next token starts with a
  character that is not a letter or digit (a space, punctuation, a line break) or is a
  special token is at least WORD_END_MIN. Only the candidates about to be verified are
  checked (a short batched forward pass; results cached per model and token).
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np
import torch

from sequence_salience import scoring
from sequence_salience.errors import SalienceError
from sequence_salience.methods.gradients import weighted_gradient
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.salience import build_inputs
from sequence_salience.scoring import Cancel, Progress
from sequence_salience.text import ChatPrompt

DIRECTIONS = ("decrease", "increase")
WORD_END_MIN = 0.35  # p(the word ends after the token) a replacement needs (module docstring)
WORD_END_CONTEXT = "Word:"
# Word shapes (`word_vocabulary`): 0 not a word, else the case pattern.
NOT_WORD, LOWER, CAPITALIZED, UPPER, DIGITS = 0, 1, 2, 3, 4
_VOCAB_CACHE: dict[int, tuple[object, np.ndarray, np.ndarray, list[str], np.ndarray]] = {}
_WORD_END_CACHE: "weakref.WeakKeyDictionary[torch.nn.Module, dict[int, float]]" = weakref.WeakKeyDictionary()


def _shape(core: str) -> int:
    if not core:
        return NOT_WORD
    if core.isdigit():
        return DIGITS
    if not core.isalpha():
        return NOT_WORD
    if core.islower():
        return LOWER
    if core.isupper():
        return UPPER if len(core) > 1 else CAPITALIZED
    if core[0].isupper() and core[1:].islower():
        return CAPITALIZED
    return NOT_WORD  # mixed case ("iPhone", "WARRan")


def word_vocabulary(tokenizer, size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Which of the first `size` ids have the shape of a word (module docstring; completeness is
    `word_end_probability`'s part).

    Returns:
      shape: <int8>[size] NOT_WORD (0) or the case pattern (LOWER, CAPITALIZED, UPPER, DIGITS) of the
        text after an optional leading space; leading_space: <bool>[size]; texts: decoded text of each id.
      `shape > 0` is the word mask.
    """
    key = id(tokenizer)
    cached = _VOCAB_CACHE.get(key)
    if cached is not None and cached[0] is tokenizer and len(cached[1]) == size:
        return cached[1], cached[2], cached[3]
    n_tok = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(min(size, n_tok))], clean_up_tokenization_spaces=False)
    texts += [""] * (size - len(texts))
    special = set(tokenizer.all_special_ids)
    shape = np.zeros(size, dtype=np.int8)
    lead = np.zeros(size, dtype=bool)
    for i, t in enumerate(texts):
        if i in special or not t or "\ufffd" in t:
            continue
        core = t[1:] if t[0] == " " else t
        shape[i] = _shape(core)
        lead[i] = t[0] == " "
    boundary = np.array([i in special or (bool(t) and not t[0].isalnum()) for i, t in enumerate(texts)])
    _VOCAB_CACHE[key] = (tokenizer, shape, lead, texts, boundary)
    return shape, lead, texts


def word_end_probability(lm: LanguageModel, token_ids) -> np.ndarray:
    """<float64>[n] p(the next token starts a new word | BOS, "Word:", token) for each token id: the
    summed probability of the tokens whose text starts with a non-alphanumeric character or that
    are special ("Word:" + "\n" before a token without a leading space). Cached per model and token."""
    V = lm.model.get_input_embeddings().weight.shape[0]
    word_vocabulary(lm.tokenizer, V)
    _, _, lead, texts, boundary = _VOCAB_CACHE[id(lm.tokenizer)]
    cache = _WORD_END_CACHE.setdefault(lm.model, {})
    todo = sorted({int(t) for t in token_ids if int(t) not in cache})
    if todo:
        bos = [lm.tokenizer.bos_token_id] if lm.tokenizer.bos_token_id is not None else []
        with_space = bos + list(lm.tokenize(WORD_END_CONTEXT).ids)
        without = bos + list(lm.tokenize(WORD_END_CONTEXT + "\n").ids)
        mask = torch.as_tensor(boundary[:V], device=lm.device)
        for b0 in range(0, len(todo), 256):
            chunk = todo[b0:b0 + 256]
            groups: dict[int, list[int]] = {}
            for t in chunk:  # the two contexts differ in length: one batch each
                groups.setdefault(int(lead[t]), []).append(t)
            for has_space, toks in groups.items():
                ctx = with_space if has_space else without
                ids = torch.tensor([ctx + [t] for t in toks], device=lm.device)  # [n, C + 1]
                with torch.no_grad():
                    logits = lm.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
                probs = torch.softmax(logits[:, -1].double(), -1)[:, :V]  # [n, V]
                ends = probs[:, mask].sum(-1).cpu().numpy()
                for t, p in zip(toks, ends):
                    cache[t] = float(p)
    return np.array([cache[int(t)] for t in token_ids], dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class Flip:
    """One verified substitution of prompt token `position` (old_id -> new_id).

    Attributes:
      char_span: (start, end) of the replaced text in the prompt text.
      old_text, new_text: the replaced text and its replacement (as it appears in edited_text).
      estimated_delta: the first-order estimate of the one-id edit (the ranking score);
      delta: the exact change of log p(target span) for edited_text re-tokenized (what Load
        gives), new log-prob minus the original; logprob: the new log-prob.
      keeps_greedy: the target is still the greedy response after the flip (with the stop
        token when the original had one), for the re-tokenized text.
      edited_text: the prompt text with the substitution.
      retokenized: re-tokenizing edited_text gave other ids than the one-id edit.
      word_end: p(the word ends after new_id) (`word_end_probability`).
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
    retokenized: bool = False
    word_end: float = float("nan")


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


def _edited(prompt: str | ChatPrompt, s: int, e: int, new_text: str) -> str | ChatPrompt:
    """The prompt with text[s:e] replaced (role spans after it shifted), as Load would format it."""
    if not isinstance(prompt, ChatPrompt):
        return prompt[:s] + new_text + prompt[e:]
    shift = len(new_text) - (e - s)
    spans = tuple((a if a <= s else a + shift, b if b < e else b + shift, r) for a, b, r in prompt.role_spans)
    return dataclasses.replace(prompt, text=prompt.text[:s] + new_text + prompt.text[e:], role_spans=spans)


def _flip_positions(encoded, is_word: np.ndarray, regions: scoring.Regions | None) -> np.ndarray:
    """<int64>[P'] the prompt positions that may be flipped: whole-word tokens that are not special, inside
    `regions` when given; SalienceError when there are none."""
    ids_arr = np.asarray(encoded.ids)
    candidate = is_word[ids_arr] & ~np.asarray(encoded.special, dtype=bool)  # [P]
    candidate &= _whole_words(encoded.text, encoded.offsets)
    if regions is not None:
        offs = np.asarray(encoded.offsets, dtype=np.int64).reshape(-1, 2)
        inside = np.zeros(len(ids_arr), dtype=bool)
        for a, b in regions:
            inside |= (offs[:, 0] >= a) & (offs[:, 1] <= b)
        candidate &= inside
    positions = np.flatnonzero(candidate)  # [P']
    if len(positions) == 0:
        raise SalienceError("The prompt has no word tokens to flip. Fix: use a prompt with words.")
    return positions


def _estimated_deltas(lm: LanguageModel, prompt_ids: tuple[int, ...], tgt, span: tuple[int, int],
                      positions: np.ndarray) -> torch.Tensor:
    """<float64>[P', V] the first-order estimate of the change of log p(span) when the token at each of
    `positions` is replaced by each vocabulary token: g . (e_new - e_old), one forward and backward."""
    emb = lm.model.get_input_embeddings().weight  # [V, D]
    inputs = build_inputs(lm, [(prompt_ids, tgt)])
    weights = torch.zeros(1, len(tgt), device=lm.device)
    weights[0, span[0]:span[1]] = 1.0
    _, g = weighted_gradient(inputs, inputs.embeds, weights)  # [1, L, D]
    g = g[0, positions].double()  # [P', D]
    e = emb.detach().double()  # [V, D]
    with torch.no_grad():
        return g @ e.T - (g * e[torch.as_tensor(np.asarray(prompt_ids)[positions])]).sum(-1, keepdim=True)  # [P', V]


def _picks(lm: LanguageModel, est: torch.Tensor, old: torch.Tensor, shape: np.ndarray, lead: np.ndarray, sign: float,
           n_verify: int, per_position: int, word_end_min: float) -> tuple[list[tuple[int, int]], dict[int, float]]:
    """(the (position index, new token) pairs to verify, best estimates first: a replacement of the same shape
    and leading-space form that ends a word (p >= word_end_min), at most per_position per position and n_verify
    in all; new token -> its p(word ends))."""
    shape_t, lead_t = torch.as_tensor(shape), torch.as_tensor(lead)
    # Same shape (case pattern / digits) and the same leading-space form as the replaced word.
    allowed = (shape_t[None, :] == shape_t[old][:, None]) & (lead_t[None, :] == lead_t[old][:, None])
    allowed[torch.arange(len(old)), old] = False
    ranked = torch.where(allowed, sign * est, torch.tensor(-np.inf, dtype=est.dtype))  # larger = better
    # More candidates than needed: some are not complete words (word_end_probability).
    k = min(4 * per_position, int(allowed.sum(-1).max()))
    best_v, best_j = ranked.topk(max(1, k), dim=-1)  # [P', k]
    flat = best_v.flatten()
    order = [int(i) for i in torch.argsort(flat, descending=True) if torch.isfinite(flat[i])]
    pool = [(i // best_j.shape[1], int(best_j.flatten()[i])) for i in order[:4 * n_verify]]
    ends = dict(zip((v for _, v in pool), word_end_probability(lm, [v for _, v in pool]))) if pool else {}
    picks, per = [], {}
    for pi, v in pool:  # best estimates first; complete words only; at most per_position per position
        if ends[v] < word_end_min or per.get(pi, 0) >= per_position:
            continue
        per[pi] = per.get(pi, 0) + 1
        picks.append((pi, v))
        if len(picks) == n_verify:
            break
    return picks, ends


@dataclasses.dataclass(frozen=True)
class _Edit:
    """One picked flip as Load produces it: the edited text, re-tokenized."""

    position: int
    new_id: int
    char_span: tuple[int, int]
    old_text: str
    new_text: str
    ids: tuple[int, ...]
    retokenized: bool


def _edit(lm: LanguageModel, prompt: str | ChatPrompt, encoded, position: int, new_id: int, texts: list[str]) -> _Edit:
    """The prompt with the word token at `position` replaced by `new_id`, re-tokenized as Load would."""
    s, e = (int(x) for x in encoded.offsets[position])
    old_text, new_text = _replacement(encoded.text, (s, e), texts[encoded.ids[position]], texts[new_id])
    ids = tuple(lm.encode_prompt(_edited(prompt, s, e, new_text)).ids)
    one_id = list(encoded.ids)
    one_id[position] = new_id
    return _Edit(position, new_id, (s, e), old_text, new_text, ids, list(ids) != one_id)


def _verify(lm: LanguageModel, prompts: list, tgt, span: tuple[int, int], batch_size: int, slice_s: float | None,
            progress: Progress | None, cancel: Cancel | None) -> tuple[np.ndarray, np.ndarray]:
    """(<float64>[M] log p(span) of each prompt, <bool>[M] whether it keeps the greedy response): the
    response's every token stays the argmax and, when the original's response ends with a stop token
    (prompts[0]: the original), the edited one's too. Progress "flips" counts the edited prompts."""
    lps, greedy, stops = [], [], []
    for sl, measured in scoring.sliced_batches(len(prompts), batch_size, slice_s):
        scoring.check_cancel(cancel, "token flips")
        lp, gr, st = scoring.score_greedy(lm, prompts[sl], tgt, span, sl.stop - sl.start)
        measured()
        lps.append(lp), greedy.append(gr), stops.append(st)
        if progress is not None:
            progress("flips", sl.stop - 1, len(prompts) - 1)
    lp, greedy, stops = np.concatenate(lps), np.concatenate(greedy), np.concatenate(stops)
    needs_stop = bool(stops[0])
    return lp, greedy & (stops | (not needs_stop))


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
    word_end_min: float = WORD_END_MIN,
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
      word_end_min: the p(word ends) a replacement needs (module docstring).
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
    shape, lead, texts = word_vocabulary(lm.tokenizer, lm.model.get_input_embeddings().weight.shape[0])
    is_word = shape > 0
    positions = _flip_positions(encoded, is_word, regions)  # [P']

    scoring.check_cancel(cancel, "token flips")
    est = _estimated_deltas(lm, prompt_ids, tgt, (t0, t1), positions)  # [P', V]
    sign = -1.0 if direction == "decrease" else 1.0
    old = torch.as_tensor(np.asarray(prompt_ids)[positions])
    picks, ends = _picks(lm, est, old, shape, lead, sign, n_verify, per_position, word_end_min)
    edits = [_edit(lm, prompt, encoded, int(positions[pi]), v, texts) for pi, v in picks]
    lp, keeps = _verify(lm, [list(prompt_ids)] + [list(x.ids) for x in edits], tgt, (t0, t1), batch_size, slice_s,
                        progress, cancel)
    text, original = encoded.text, float(lp[0])
    flips = [Flip(position=x.position, old_id=int(prompt_ids[x.position]), new_id=int(x.new_id), char_span=x.char_span,
                  old_text=x.old_text, new_text=x.new_text, estimated_delta=float(est[pi, x.new_id]),
                  delta=float(lp[n + 1] - original), logprob=float(lp[n + 1]), keeps_greedy=bool(keeps[n + 1]),
                  edited_text=text[:x.char_span[0]] + x.new_text + text[x.char_span[1]:], retokenized=x.retokenized,
                  word_end=float(ends[x.new_id]))
             for n, ((pi, _), x) in enumerate(zip(picks, edits))]
    flips.sort(key=lambda f: sign * -f.delta)
    return FlipReport(
        prompt_text=text, span=(t0, t1), direction=direction, original_logprob=original,
        original_keeps_greedy=bool(keeps[0]), flips=tuple(flips[:top_k]), n_positions=len(positions),
        n_vocabulary=int(is_word.sum()), n_verified=len(picks),
    )
