"""Per-layer predictions ("logit lens") and feed-forward sub-updates at one position.

For the position that predicts one token, one forward pass (no backward)
records, at every layer, the residual stream before and after the feed-forward
block and the FFN's coefficients. The residuals are read through the model's
final norm and unembedding (LM-Debugger, Geva et al. 2022,
https://arxiv.org/abs/2204.12130; the "logit lens"); the FFN output is split
into sub-updates ``coef_i * v_i`` (one per value vector), ranked by
``|coef_i| * ||v_i||``, each with the tokens its value vector promotes.

The capture hooks return nothing, so the forward pass computes exactly what it
computes without them. Run it inside `interventions.apply_interventions(...)`
to trace the model under interventions.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import torch

from sequence_salience.errors import SalienceError
from sequence_salience.inside.architectures import Architecture, resolve_architecture
from sequence_salience.inside.hooks import hook_scope
from sequence_salience.model import Generation, LanguageModel
from sequence_salience.text import ChatPrompt


def plain(obj):
    """Tuples -> lists, NumPy scalars/arrays -> Python numbers/lists, recursively (JSON-able)."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


@dataclasses.dataclass(frozen=True)
class TraceConfig:
    """How much of the trace to keep.

    Attributes:
      top_k: predictions kept per layer (before and after the FFN).
      top_sub_updates: sub-updates kept per layer (largest |coef| * ||value||).
      value_top_tokens: tokens shown for each kept sub-update's value vector.
    """

    top_k: int = 10
    top_sub_updates: int = 10
    value_top_tokens: int = 8

    def __post_init__(self):
        for name in ("top_k", "top_sub_updates", "value_top_tokens"):
            if getattr(self, name) < 1:
                raise SalienceError(f"TraceConfig.{name}={getattr(self, name)}; it must be at least 1.")


@dataclasses.dataclass(frozen=True)
class Predictions:
    """One read-out of the residual stream.

    Attributes:
      ids / tokens / probs: the top-k tokens, best first, and their probabilities.
      target_rank: rank of the target token (0 = top prediction).
      target_prob: its probability.
    """

    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    probs: tuple[float, ...]
    target_rank: int
    target_prob: float


@dataclasses.dataclass(frozen=True)
class SubUpdate:
    """One value vector's contribution coef * v at the traced position.

    Attributes:
      layer / index: which value vector (index into the layer's F values).
      coef: its coefficient (negative: it pushes its tokens down).
      norm: ||v||.
      score: |coef| * ||v||, the ranking key.
      top_ids / top_tokens: the tokens with the largest E v (the value's own tokens).
    """

    layer: int
    index: int
    coef: float
    norm: float
    score: float
    top_ids: tuple[int, ...]
    top_tokens: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class LayerTrace:
    """One layer: predictions before/after its FFN and the FFN's largest sub-updates.

    Attributes:
      max_coef: the largest coefficient at this position (an `on` intervention sets just above it).
      ffn_norm: ||FFN output|| at this position.
    """

    layer: int
    before: Predictions
    after: Predictions
    sub_updates: tuple[SubUpdate, ...]
    max_coef: float
    ffn_norm: float


@dataclasses.dataclass(frozen=True)
class Trace:
    """The layer-by-layer trace of one position.

    Attributes:
      family: the architecture family (architectures.FAMILIES).
      ids: the input ids up to and including `position`.
      position: the traced position; it predicts token `position + 1`.
      target_id / target_token: the token whose rank and probability are followed
        (the given next token, else the model's own top prediction).
      layers: one LayerTrace per decoder layer.
      output: the model's own next-token distribution at `position`.
      seconds: wall time of the forward pass and read-out.
    """

    family: str
    ids: tuple[int, ...]
    position: int
    target_id: int
    target_token: str
    layers: tuple[LayerTrace, ...]
    output: Predictions
    seconds: float

    def ranks(self, where: str = "after") -> list[int]:
        """The target's rank at each layer, "before" or "after" the FFN."""
        return [getattr(layer, where).target_rank for layer in self.layers]

    def probs(self, where: str = "after") -> list[float]:
        return [getattr(layer, where).target_prob for layer in self.layers]

    def as_dict(self) -> dict:
        """Plain JSON-able dict (the LIT payload of docs/architecture.md, "Inside the model")."""
        return plain(dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class Capture:
    """Raw tensors of one traced forward pass (the model's dtype, on CPU), for tests and custom analyses.

    Attributes:
      before / after: <[L, D]> residual stream before / after each FFN.
      coefs: <[L, F]> FFN coefficients (input of the output projection).
      ffn_out: <[L, D]> FFN output (the output projection's output).
      logits: <[V]> the model's own logits.
    """

    before: torch.Tensor
    after: torch.Tensor
    coefs: torch.Tensor
    ffn_out: torch.Tensor
    logits: torch.Tensor


def sequence_ids(lm: LanguageModel, prompt: str | ChatPrompt, target: str | Generation | None) -> tuple[list[int], int]:
    """(ids of prompt + target, P): target token t sits at position P + t, predicted at P + t - 1."""
    prompt_text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
    if not prompt_text.strip():
        raise SalienceError("The prompt is empty. Fix: type a prompt to trace.")
    ids = list(lm.encode_prompt(prompt).ids)
    n_prompt = len(ids)
    if isinstance(target, Generation):
        ids += list(target.ids)
    elif target:
        ids += list(lm.tokenize(target, add_special_tokens=False).ids)
    return ids, n_prompt


@torch.no_grad()
def capture(lm: LanguageModel, ids: Sequence[int], position: int, arch: Architecture | None = None) -> Capture:
    """One forward pass over ids[:position + 1], recording the residual stream and FFN at `position`."""
    arch = arch or resolve_architecture(lm.model)
    if not 0 <= position < len(ids):
        raise SalienceError(f"Position {position} is outside the {len(ids)} input tokens. Fix: pick 0..{len(ids) - 1}.")
    if position + 1 > lm.max_length:
        raise SalienceError(
            f"Position {position} is past this model's context of {lm.max_length:,} tokens. Fix: shorten the prompt.")
    n = arch.num_layers
    before: list[torch.Tensor | None] = [None] * n
    after: list[torch.Tensor | None] = [None] * n
    coefs: list[torch.Tensor | None] = [None] * n
    ffn_out: list[torch.Tensor | None] = [None] * n

    def keep(store, i):
        def pre(_module, args):
            store[i] = args[0][0, position].detach().cpu()
        return pre

    def keep_out(store, i):
        def post(_module, _args, output):
            out = output[0] if isinstance(output, tuple) else output
            store[i] = out[0, position].detach().cpu()
        return post

    input_ids = torch.tensor([list(ids[: position + 1])], device=lm.device)  # [1, S]
    with hook_scope() as hooks:
        for i in range(n):
            hooks.pre(arch.ffn_norms[i], keep(before, i))
            hooks.pre(arch.ffn_outs[i], keep(coefs, i))
            hooks.post(arch.ffn_outs[i], keep_out(ffn_out, i))
            hooks.post(arch.layers[i], keep_out(after, i))
        out = lm.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False)
    missing = [i for i in range(n) if before[i] is None or after[i] is None or coefs[i] is None]
    if missing:
        raise SalienceError(
            f"Layer(s) {missing} of {arch.family} did not run their hooked modules "
            f"({arch.layout.ffn_norm}, {arch.layout.ffn}.{arch.layout.ffn_out}); this layout is not supported. "
            "Fix: add the family to sequence_salience/inside/architectures.py."
        )
    return Capture(
        before=torch.stack(before),  # [L, D]
        after=torch.stack(after),  # [L, D]
        coefs=torch.stack(coefs),  # [L, F]
        ffn_out=torch.stack(ffn_out),  # [L, D]
        logits=out.logits[0, -1].detach().cpu(),  # [V]
    )


class _Decoder:
    """Token strings, decoded once per id."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, i: int) -> str:
        s = self.cache.get(i)
        if s is None:
            s = self.cache[i] = self.tokenizer.decode([i])
        return s


def _predictions(probs: torch.Tensor, k: int, target_id: int, decode: _Decoder) -> list[Predictions]:
    """probs <[R, V]> -> per row: top-k and the target's rank (tokens with a strictly higher probability)."""
    top = torch.topk(probs, k, dim=-1)  # [R, k]
    p_target = probs[:, target_id]  # [R]
    ranks = (probs > p_target[:, None]).sum(-1).tolist()  # [R]
    top_ids, top_probs, p_target = top.indices.tolist(), top.values.tolist(), p_target.tolist()
    return [
        Predictions(
            ids=tuple(top_ids[r]),
            tokens=tuple(decode(i) for i in top_ids[r]),
            probs=tuple(top_probs[r]),
            target_rank=int(ranks[r]),
            target_prob=float(p_target[r]),
        )
        for r in range(probs.shape[0])
    ]


@torch.no_grad()
def value_norms(arch: Architecture) -> torch.Tensor:
    """<[L, F]> ||v|| of every value vector (float32, CPU)."""
    return torch.stack([arch.value_matrix(i).float().norm(dim=1).cpu() for i in range(arch.num_layers)])


@torch.no_grad()
def value_top_tokens(arch: Architecture, pairs: Sequence[tuple[int, int]], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k vocabulary projection of value vectors (layer, index): (ids <[n, k]>, scores <[n, k]>).

    One product with the unembedding for all of them (it is read from memory once).
    """
    emb = arch.unembedding_matrix()
    vectors = torch.stack([arch.value_matrix(layer)[index].to(emb.device, emb.dtype) for layer, index in pairs])  # [n, D]
    top = torch.topk(arch.project(vectors).float(), k, dim=-1)  # [n, k]
    return top.indices.cpu(), top.values.cpu()


@torch.no_grad()
def trace_ids(
    lm: LanguageModel,
    ids: Sequence[int],
    position: int,
    target_id: int | None = None,
    config: TraceConfig = TraceConfig(),
    arch: Architecture | None = None,
    index=None,
) -> Trace:
    """The trace of `position` in `ids`; `target_id` defaults to the model's own top prediction there.

    `index` (a `value_index.ValueIndex` of this model, possibly partial) supplies the
    sub-updates' top tokens for the layers it holds instead of projecting their values again.
    """
    start = time.perf_counter()
    arch = arch or resolve_architecture(lm.model)
    cap = capture(lm, ids, position, arch)
    out_probs = torch.softmax(cap.logits.float(), -1)  # [V]
    vocab = out_probs.shape[-1]
    if target_id is None:
        target_id = int(out_probs.argmax())
    if not 0 <= target_id < vocab:
        raise SalienceError(f"Target token id {target_id} is outside the vocabulary of {vocab}.")
    n = arch.num_layers
    probs = torch.softmax(arch.logits(torch.cat([cap.before, cap.after])).float(), -1).cpu()  # [2L, V]
    k = min(config.top_k, vocab)
    decode = _Decoder(lm.tokenizer)
    norms = value_norms(arch)  # [L, F]
    coefs = cap.coefs.float()  # [L, F]
    scores = coefs.abs() * norms  # [L, F]
    n_sub = min(config.top_sub_updates, scores.shape[1])
    top = torch.topk(scores, n_sub, dim=-1)  # [L, n_sub]
    pairs = [(i, j) for i in range(n) for j in top.indices[i].tolist()]
    k_tok = min(config.value_top_tokens, vocab)
    indexed = index is not None and index.top_k >= k_tok
    built = index.layers_built if indexed else 0
    missing = [pq for pq in pairs if pq[0] >= built]
    projected = value_top_tokens(arch, missing, k_tok)[0].tolist() if missing else []  # [m, k]
    tok_ids, m = [], 0
    for layer, j in pairs:
        if layer < built:
            tok_ids.append([int(x) for x in index.top_ids[layer, j, :k_tok]])
        else:
            tok_ids.append(projected[m])
            m += 1
    preds = _predictions(probs, k, target_id, decode)  # 2L
    top_idx, top_val = top.indices.tolist(), top.values.tolist()
    coef_np, norm_np = coefs.numpy(), norms.numpy()
    max_coefs, ffn_norms = coefs.max(-1).values.tolist(), cap.ffn_out.float().norm(dim=-1).tolist()
    layers = []
    for i in range(n):
        subs = []
        for r in range(n_sub):
            j, row = top_idx[i][r], i * n_sub + r
            subs.append(SubUpdate(
                layer=i, index=j, coef=float(coef_np[i, j]), norm=float(norm_np[i, j]), score=float(top_val[i][r]),
                top_ids=tuple(tok_ids[row]), top_tokens=tuple(decode(t) for t in tok_ids[row]),
            ))
        layers.append(LayerTrace(
            layer=i, before=preds[i], after=preds[n + i], sub_updates=tuple(subs),
            max_coef=max_coefs[i], ffn_norm=ffn_norms[i],
        ))
    return Trace(
        family=arch.family,
        ids=tuple(int(i) for i in ids[: position + 1]),
        position=position,
        target_id=target_id,
        target_token=decode(target_id),
        layers=tuple(layers),
        output=_predictions(out_probs[None], k, target_id, decode)[0],
        seconds=time.perf_counter() - start,
    )


def trace(
    lm: LanguageModel,
    prompt: str | ChatPrompt,
    target: str | Generation | None = None,
    t: int = 0,
    config: TraceConfig = TraceConfig(),
) -> Trace:
    """How the model builds its prediction of target token `t`, layer by layer.

    Args:
      lm: a loaded model.
      prompt: raw text (the tokenizer adds BOS) or a ChatPrompt (lm.format_prompt).
      target: the response (text or Generation). None: trace the next token after
        the prompt, following the model's own top prediction.
      t: which target token (0-based); the traced position is the one before it.
      config: how much to keep.
    """
    ids, n_prompt = sequence_ids(lm, prompt, target)
    n_targets = len(ids) - n_prompt
    if target is None or n_targets == 0:
        if t != 0:
            raise SalienceError(f"t={t} but there is no target. Fix: pass the response as `target`, or t=0.")
        return trace_ids(lm, ids, n_prompt - 1, None, config)
    if not 0 <= t < n_targets:
        raise SalienceError(f"t={t} is outside the {n_targets} target tokens. Fix: pick 0..{n_targets - 1}.")
    return trace_ids(lm, ids, n_prompt + t - 1, ids[n_prompt + t], config)
