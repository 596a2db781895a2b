"""Shared plumbing for the explanation tests (explain/) and the segment methods (ablation/): pair
tokenization, prompt segments, batched scoring.

Every explanation test and ablation edits the prompt (replaces or deletes segments, swaps one
token) and asks how log p(target span) changes. `score` answers that for many edited
prompts at once: padded batches (salience.build_inputs), one forward pass per batch,
no backward. `score_greedy` also says whether the target is still the model's greedy
continuation (teacher forcing: every target token is the argmax after its prefix, and,
when required, a stop token is the argmax after the last one; that is exactly "greedy
generation reproduces the target").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from sequence_salience import aggregate
from sequence_salience.errors import ComputationCancelled, SalienceError
from sequence_salience.methods.gradients import supports_logits_to_keep, target_logprobs
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.result import SalienceResult
from sequence_salience.salience import build_inputs
from sequence_salience.slices import SliceSizer, batches, make_sizer
from sequence_salience.text import ChatPrompt

# progress(stage, done, total); cancel() -> True to stop (raises ComputationCancelled).
Progress = Callable[[str, int, int], None]
Cancel = Callable[[], bool]

DEFAULT_BATCH_SIZE = 8


def prompt_text(prompt: str | ChatPrompt) -> str:
    return prompt.text if isinstance(prompt, ChatPrompt) else prompt


def encode_prompt(lm: LanguageModel, prompt: str | ChatPrompt, text: str | None = None) -> tuple[int, ...]:
    """Token ids of `prompt`, or of an edited `text` tokenized the same way (BOS / template markers)."""
    if text is None:
        return tuple(lm.encode_prompt(prompt).ids)
    if isinstance(prompt, ChatPrompt):
        return tuple(lm.encode_prompt(dataclasses.replace(prompt, text=text)).ids)
    return tuple(lm.encode_prompt(text).ids)


def target_ids(lm: LanguageModel, target: str | Generation) -> tuple[int, ...]:
    """Ids of the target as compute_salience takes them (a Generation's own ids, else tokenized)."""
    ids = tuple(target.ids) if isinstance(target, Generation) else tuple(lm.tokenize(target).ids)
    if not ids:
        raise SalienceError("The target is empty. Fix: generate a response first, or type the text to explain.")
    return ids


def resolve_span(span: tuple[int, int] | None, num_targets: int) -> tuple[int, int]:
    t0, t1 = (0, num_targets) if span is None else (int(span[0]), int(span[1]))
    if not 0 <= t0 < t1 <= num_targets:
        raise SalienceError(f"Target span {t0}:{t1} is outside 0:{num_targets}. Fix: pick target tokens in range.")
    return t0, t1


def check_cancel(cancel: Cancel | None, what: str) -> None:
    if cancel is not None and cancel():
        raise ComputationCancelled(f"{what} cancelled")


@dataclasses.dataclass(frozen=True)
class PromptSegments:
    """The prompt segments an explanation test may remove, at one granularity.

    Attributes:
      segmentation: aggregate.segment over the whole text (prompt + target).
      index: <int64>[K] segment index (into `segmentation`) of each removable segment, text order.
      tokens: K arrays of prompt token indices in each segment (never special tokens).
      spans: K character spans (start, end) in the prompt text (clipped at the prompt end).
    """

    segmentation: aggregate.Segmentation
    index: np.ndarray
    tokens: tuple[np.ndarray, ...]
    spans: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.index)

    def texts(self, text: str) -> list[str]:
        return [text[s:e] for s, e in self.spans]

    def matches_only(self) -> "PromptSegments":
        """These segments without the text between regex matches (kind "gap": context, not ranked)."""
        kinds = self.segmentation.kinds
        keep = [i for i, s in enumerate(self.index) if kinds[int(s)] != "gap"]
        return dataclasses.replace(self, index=self.index[keep], tokens=tuple(self.tokens[i] for i in keep),
                                   spans=tuple(self.spans[i] for i in keep))

    def scores(self, token_salience: np.ndarray) -> np.ndarray:
        """<float64>[K] salience of each removable segment: the sum over its tokens (aggregate, "sum")."""
        values = aggregate.aggregate(token_salience, self.segmentation, "sum", keep_excluded=True)  # [S]
        return values[self.index]


Regions = Sequence[tuple[int, int]]


def prompt_segments(result: SalienceResult, granularity: str, pattern: str | None = None,
                    regions: Regions | None = None) -> PromptSegments:
    """Removable prompt segments: those holding at least one prompt token that is not special.

    Chat-template markup (excluded segments, special marker tokens) and BOS are never removed.
    regions: optional character ranges of the prompt text; only tokens inside one of them
      are removed, and segment spans are clipped to it (e.g. only the user's own message,
      not the template's default system prompt).
    """
    seg = aggregate.segment(result.text, result.offsets, granularity, pattern=pattern,
                            role_spans=result.role_spans)
    P = result.n_prompt_tokens
    owner = seg.token_segment[:P]  # [P]
    ok = ~np.asarray(result.special[:P], dtype=bool) & (owner >= 0)
    ok &= ~seg.excluded[np.clip(owner, 0, None)]
    region_of = np.full(P, -1)
    if regions is not None:
        offs = np.asarray(result.offsets[:P])
        for r, (a, b) in enumerate(regions):
            region_of[(offs[:, 0] >= a) & (offs[:, 1] <= b) & (offs[:, 1] > offs[:, 0])] = r
        ok &= region_of >= 0
    index, tokens, spans = [], [], []
    for s in np.unique(owner[ok]):
        toks = np.flatnonzero(ok & (owner == s))
        start = int(seg.starts[s])
        end = min(int(seg.ends[s]), result.prompt_end)
        if granularity == "token":
            start, end = int(result.offsets[toks[0], 0]), int(result.offsets[toks[-1], 1])
        if regions is not None:
            a, b = regions[int(region_of[toks[0]])]
            start, end = max(start, a), min(end, b)
        index.append(int(s))
        tokens.append(toks)
        spans.append((start, end))
    if not index:
        raise SalienceError(
            f"The prompt has no removable {granularity} segments (only template markup or special tokens"
            f"{', or nothing inside the editable regions' if regions is not None else ''}). "
            "Fix: use a prompt with text, or another granularity.")
    return PromptSegments(seg, np.asarray(index, dtype=np.int64), tuple(tokens), tuple(spans))


def delete_spans(text: str, spans: Sequence[tuple[int, int]], start: int = 0, end: int | None = None) -> str:
    """text[start:end] with the characters of `spans` removed."""
    end = len(text) if end is None else end
    keep = np.ones(len(text), dtype=bool)
    for s, e in spans:
        keep[s:e] = False
    return "".join(c for c, k in zip(text[start:end], keep[start:end]) if k)


def replace_spans(text: str, spans: Sequence[tuple[int, int]], replacements: Sequence[str], start: int = 0,
                  end: int | None = None) -> str:
    """text[start:end] with each of `spans` (not overlapping) replaced by its replacement; a span
    outside [start, end) is left out, one that crosses a bound is clipped to it."""
    end = len(text) if end is None else end
    out, pos = [], start
    for (s, e), r in sorted(zip(spans, replacements)):
        s, e = max(s, start), min(e, end)
        if e <= s:
            continue
        out += [text[pos:s], r]
        pos = e
    out.append(text[pos:end])
    return "".join(out)


REMOVALS = ("filler", "delete")


class PromptEditor:
    """Edited prompts from sets of removed segments (positions into a PromptSegments).

    removal="filler": every token of a removed segment becomes the filler token, so positions
      and the token count stay the same; removal="delete": the segments' text is deleted and
      the prompt re-tokenized (BOS / template markers as the original).
    """

    def __init__(self, lm: LanguageModel, prompt: str | ChatPrompt, result: SalienceResult,
                 segs: PromptSegments, removal: str, filler: int):
        if removal not in REMOVALS:
            raise SalienceError(f"Unknown removal {removal!r}. Fix: use one of {', '.join(REMOVALS)}.")
        self.lm, self.prompt, self.segs, self.removal, self.filler = lm, prompt, segs, removal, filler
        self.ids = np.asarray(result.ids[:result.n_prompt_tokens], dtype=np.int64)  # [P]
        self.offsets = np.asarray(result.offsets[:result.n_prompt_tokens], dtype=np.int64)  # [P, 2]
        self.text = result.text[:result.prompt_end]
        self.filler_text = lm.tokenizer.decode([filler]) if removal == "filler" else ""

    def __call__(self, removed) -> tuple[int, ...]:
        """Token ids of the prompt without the `removed` segments."""
        removed = sorted(int(r) for r in removed)
        if self.removal == "filler":
            ids = self.ids.copy()
            for r in removed:
                ids[self.segs.tokens[r]] = self.filler
            return tuple(int(i) for i in ids)
        return encode_prompt(self.lm, self.prompt, self.edited_text(removed))

    def token_spans(self, r: int) -> tuple[tuple[int, int], ...]:
        """Character spans of removable segment r's tokens."""
        return tuple((int(a), int(b)) for a, b in self.offsets[self.segs.tokens[int(r)]])

    def edited_text(self, removed, start: int = 0, end: int | None = None) -> str:
        """The prompt text[start:end] without the `removed` segments: deleted, or (filler) each
        of their tokens' text replaced by the filler text (the text of the edited ids).
        Re-tokenizing a filler text need not give the filler ids back (neighbouring fillers may
        merge into one token)."""
        if self.removal == "delete":
            return delete_spans(self.text, [self.segs.spans[int(r)] for r in removed], start, end)
        spans = [sp for r in removed for sp in self.token_spans(r)]
        return replace_spans(self.text, spans, [self.filler_text] * len(spans), start, end)


def filler_id(lm: LanguageModel, filler: str | int) -> int:
    """The token id that replaces removed tokens: an id, or a text that is exactly one token."""
    if isinstance(filler, (int, np.integer)):
        return int(filler)
    ids = lm.tokenize(filler).ids
    if len(ids) != 1:
        raise SalienceError(
            f"The filler {filler!r} is {len(ids)} tokens for this tokenizer; it must be exactly one. "
            "Fix: pass a single-token text such as ' ' or '.', or a token id.")
    return int(ids[0])


def _batches(n: int, size: int):
    for b0 in range(0, n, size):
        yield slice(b0, min(n, b0 + size))


def sliced_batches(n: int, size: int, slice_s: "float | SliceSizer | None"):
    """(slice of rows, done(rows)) per forward batch: `size` rows each, or, with `slice_s` (seconds or a
    slices.SliceSizer), as many rows (at most `size`) as took about slice_s on the batches before.

    Call done() right after each batch's forward, so that its cost sizes the next one.
    """
    sizer = make_sizer(slice_s)
    for sl in batches(n, size, sizer):
        start = sizer.clock() if sizer is not None else 0.0

        def done(start: float = start, rows: int = sl.stop - sl.start) -> None:
            if sizer is not None:
                sizer.record(rows, sizer.clock() - start)

        yield sl, done


def score(
    lm: LanguageModel,
    prompts: Sequence[Sequence[int]],
    target: Sequence[int],
    span: tuple[int, int],
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    stage: str = "score",
    slice_s: "float | SliceSizer | None" = None,
) -> np.ndarray:
    """log p(target[t0:t1] | prompt) for each prompt: <float64>[M]. Identical prompts are scored once.

    slice_s: None: batches of `batch_size` prompts; seconds: batches of about that much model
      time (at most `batch_size` prompts), sized from the previous batch; `progress` runs after each.
    """
    unique = {tuple(p): None for p in prompts}
    keys = list(unique)
    out = np.zeros(len(keys))
    done = 0
    for sl, measured in sliced_batches(len(keys), batch_size, slice_s):
        check_cancel(cancel, stage)
        inputs = build_inputs(lm, [(keys[i], target) for i in range(sl.start, sl.stop)])
        with torch.no_grad():
            logp = target_logprobs(inputs, inputs.embeds)  # [b, T]
        measured()
        out[sl] = logp[:, span[0]:span[1]].double().sum(-1).cpu().numpy()
        done += sl.stop - sl.start
        if progress is not None:
            progress(stage, done, len(keys))
    lookup = dict(zip(keys, out))
    return np.array([lookup[tuple(p)] for p in prompts])


def score_greedy(
    lm: LanguageModel,
    prompts: Sequence[Sequence[int]],
    target: Sequence[int],
    span: tuple[int, int],
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores, plus the greedy check, with one forward per batch.

    Returns:
      logp: <float64>[M] log p(target[t0:t1] | prompt).
      greedy: <bool>[M] every target token is the argmax after its prefix.
      stops: <bool>[M] the argmax after the whole target is a stop (end-of-turn / EOS) token.
    """
    stop_ids = torch.tensor(lm.stop_token_ids or (0,), device=lm.device)
    extended = tuple(target) + (int(stop_ids[0]),)  # one more position: what follows the target
    T = len(target)
    logps, greedy, stops = [], [], []
    for sl in _batches(len(prompts), batch_size):
        # Left padding puts every row's targets at the end, so only their logits are computed.
        inputs = build_inputs(lm, [(prompts[i], extended) for i in range(sl.start, sl.stop)], padding_side="left")
        seq_len = inputs.embeds.shape[1]
        kwargs = dict(inputs_embeds=inputs.embeds, attention_mask=inputs.attention_mask,
                      position_ids=inputs.position_ids, use_cache=False)
        offset = 0
        if supports_logits_to_keep(type(inputs.model)):
            kwargs["logits_to_keep"] = T + 2
            offset = seq_len - (T + 2)
        with torch.no_grad():
            logits = inputs.model(**kwargs).logits  # [b, L or T+2, V]
        pred = (inputs.target_positions - 1).clamp(min=0) - offset  # [b, T+1]
        rows = torch.arange(logits.shape[0], device=logits.device)[:, None]
        picked = logits[rows, pred].float()  # [b, T+1, V]
        logp = picked.log_softmax(-1).gather(-1, inputs.target_ids[..., None]).squeeze(-1)  # [b, T+1]
        arg = picked.argmax(-1)  # [b, T+1]
        logps.append(logp[:, span[0]:span[1]].double().sum(-1).cpu().numpy())
        greedy.append((arg[:, :T] == inputs.target_ids[:, :T]).all(-1).cpu().numpy())
        stops.append(torch.isin(arg[:, T], stop_ids).cpu().numpy())
    return np.concatenate(logps), np.concatenate(greedy), np.concatenate(stops)


class Budget:
    """A step and wall-clock budget; `exhausted()` names the limit that ran out, or ''."""

    def __init__(self, max_steps: int | None, max_seconds: float | None):
        self.max_steps, self.max_seconds = max_steps, max_seconds
        self.steps = 0
        self.start = time.monotonic()

    def spend(self, n: int) -> None:
        self.steps += n

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> int | None:
        return None if self.max_steps is None else max(0, self.max_steps - self.steps)

    def exhausted(self) -> str:
        if self.max_steps is not None and self.steps >= self.max_steps:
            return "steps"
        if self.max_seconds is not None and self.seconds >= self.max_seconds:
            return "time"
        return ""
