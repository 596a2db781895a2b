"""Per-head attention from a target span to each prompt segment: the learned method's features.

For a prompt + target (token ids) and a segmentation of the prompt (token indices per segment), the
feature of segment s for layer l and head h is the attention that the span's query rows pay to s's
tokens, summed over s's columns and averaged over the rows:

    feature[s, l * H + h] = mean_{r in rows} sum_{j in segment s} softmax(q_r k^T * scaling + causal)[h, j]

The rows are the positions whose logits predict the span's tokens (the token before each: position
P + t - 1 for target token t of a prompt of P tokens), so a segment's feature is the attention paid to
it while the model produces the span.

Only span rows x all columns are ever formed, one layer at a time: a forward pre-hook on each
attention module takes that module's input, computes the post-rotary queries of the span rows and the
keys of every position (the module's own projections and rotary embedding), and reduces them to
<[S, H]> at once. The model's own forward is unchanged (SDPA stays on; no T x T matrix per head is
kept), and the language-model head is not run (only the base model), so the cost is one forward.

Families: Llama (and SmolLM2; grouped-query attention) and GPT-2; any other `config.model_type` gets a
SalienceError naming what is supported.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import numpy as np
import torch

from sequence_salience.errors import SalienceError

# config.model_type -> how the attention module's queries and keys are computed.
FAMILIES: dict[str, str] = {"llama": "rotary", "gpt2": "fused_qkv"}

# Most (span rows x heads x sequence length) score elements formed at once (float32: 4 bytes each).
ROW_CHUNK_ELEMENTS = 16_000_000


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    """The shape of a model's features: layers L, query heads H, and its family."""

    model_type: str
    n_layers: int
    n_heads: int

    @property
    def n_features(self) -> int:
        return self.n_layers * self.n_heads


def attention_shape(model: torch.nn.Module) -> AttentionShape:
    """The feature shape of `model`; SalienceError for a family the capture does not support."""
    cfg = model.config
    model_type = getattr(cfg, "model_type", "")
    if model_type not in FAMILIES:
        raise SalienceError(
            f"Learned attention attribution reads the attention of Llama-family and GPT-2 models; this model is "
            f"{model_type or 'of an unknown type'!r}. Fix: use leave_one_out or ablation_surrogate for it, or "
            f"load a model of type {' or '.join(FAMILIES)}.")
    return AttentionShape(model_type=model_type, n_layers=int(cfg.num_hidden_layers),
                          n_heads=int(cfg.num_attention_heads))


def _attention_modules(model: torch.nn.Module, model_type: str) -> list[torch.nn.Module]:
    base = model.base_model
    if model_type == "gpt2":
        return [block.attn for block in base.h]
    return [layer.self_attn for layer in base.layers]


def _queries_keys(module: torch.nn.Module, family: str, hidden: torch.Tensor, rows: torch.Tensor,
                  kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """q <[H, R, d]> of the span rows and k <[H, N, d]> of every position (keys repeated per query
    head under grouped-query attention), as the module computes them (rotary applied)."""
    if family == "fused_qkv":  # GPT-2: c_attn gives q, k, v side by side; positions are in the embeddings
        q, k, _ = module.c_attn(hidden[0]).split(module.split_size, dim=-1)  # [N, D] each
        d = module.head_dim
        return q[rows].view(len(rows), -1, d).transpose(0, 1), k.view(k.shape[0], -1, d).transpose(0, 1)
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # pylint: disable=import-outside-toplevel

    d = module.head_dim
    cos, sin = kwargs["position_embeddings"]  # [1, N, d] each
    q = module.q_proj(hidden[:, rows]).view(1, len(rows), -1, d).transpose(1, 2)  # [1, H, R, d]
    k = module.k_proj(hidden).view(1, hidden.shape[1], -1, d).transpose(1, 2)  # [1, KV, N, d]
    q, _ = apply_rotary_pos_emb(q, q, cos[:, rows], sin[:, rows])
    k, _ = apply_rotary_pos_emb(k, k, cos, sin)
    groups = q.shape[1] // k.shape[1]
    return q[0], k[0].repeat_interleave(groups, dim=0)  # [H, R, d], [H, N, d]


def column_attention(q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, scaling: float) -> torch.Tensor:
    """<float>[H, N]: the causal softmax attention of the rows (q <[H, R, d]> at positions `rows` <[R]>) over the
    keys k <[H, N, d]>, averaged over the rows. Rows are taken in chunks so that at most ROW_CHUNK_ELEMENTS scores
    exist at once."""
    H, N = k.shape[0], k.shape[1]
    dtype = torch.promote_types(q.dtype, torch.float32)
    cols = torch.arange(N, device=k.device)
    total = torch.zeros(H, N, dtype=dtype, device=k.device)  # [H, N] sum over rows
    step = max(1, ROW_CHUNK_ELEMENTS // max(1, H * N))
    for r0 in range(0, len(rows), step):
        r = rows[r0:r0 + step]  # [r]
        scores = torch.matmul(q[:, r0:r0 + step].to(dtype), k.to(dtype).transpose(1, 2)) * scaling  # [H, r, N]
        scores = scores.masked_fill(cols[None, None, :] > r[None, :, None], float("-inf"))
        total += torch.softmax(scores, dim=-1).sum(dim=1)  # [H, N]
    return total / len(rows)


def segment_attention(q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor, indicator: torch.Tensor,
                      scaling: float) -> torch.Tensor:
    """<float>[S, H]: column_attention summed over each segment's columns (indicator <[S, N]>, 1 where a column
    belongs to the segment)."""
    total = column_attention(q, k, rows, scaling)  # [H, N]
    return indicator.to(total.dtype) @ total.T  # [S, N] @ [N, H] -> [S, H]


def capture_features(model: torch.nn.Module, ids: Sequence[int], rows: Sequence[int],
                     segment_tokens: Sequence[Sequence[int]]) -> np.ndarray:
    """<float32>[S, L * H]: per layer and head, the attention that `rows` (query positions) pay to each
    segment's tokens, summed over the segment's columns and averaged over the rows (layer-major:
    column l * H + h).

    Args:
      model: a causal LM of a supported family (FAMILIES), in eval mode.
      ids: the token ids of prompt + target, one sequence.
      rows: the query positions, e.g. span_rows(n_prompt_tokens, span).
      segment_tokens: S lists of token positions (into `ids`), one per segment.
    """
    return capture_feature_sets(model, ids, [rows], segment_tokens)[0]


def capture_feature_sets(model: torch.nn.Module, ids: Sequence[int], row_sets: Sequence[Sequence[int]],
                         segment_tokens: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """capture_features for several sets of query rows in one forward: one <float32>[S, L * H] per set (e.g.
    the target span's rows and the rows of the prompt's last segment, the question)."""
    device = next(model.parameters()).device
    with AttentionRecorder(model, row_sets, len(ids)) as recorder:
        with torch.no_grad():
            model.base_model(input_ids=torch.as_tensor([list(ids)], dtype=torch.long, device=device), use_cache=False)
    return [recorder.features(i, segment_tokens) for i in range(len(row_sets))]


class AttentionRecorder:
    """Records, during any one forward of the model over `n_tokens` positions (the caller's: a plain forward, or
    the unedited prompt's forward that leave-one-out's scorer runs anyway), the attention that each set of query
    rows pays every column, per layer and head: <[H, N]> averaged over the rows (span rows x all columns, one
    layer at a time; no T x T kept). `features(i, segments)` then sums them over each segment's columns.

    A context manager: the pre-hooks are on the attention modules inside the block only, and record the forwards of
    the thread that entered it. A forward over another number of positions (a suffix over a cached prefix) is not
    recorded; each layer is recorded the first time it runs (a layer run again in a backward is the same)."""

    def __init__(self, model: torch.nn.Module, row_sets: Sequence[Sequence[int]], n_tokens: int):
        shape = attention_shape(model)
        self.model, self.shape, self.family = model, shape, FAMILIES[shape.model_type]
        self.n_tokens = n_tokens
        device = next(model.parameters()).device
        for rows in row_sets:
            if not rows or min(rows) < 0 or max(rows) >= n_tokens:
                raise SalienceError(f"Query rows {list(rows)[:3]}... must lie inside the {n_tokens} tokens. Fix: pass "
                                    "the positions before the target span's tokens (span_rows).")
        self.row_ts = [torch.as_tensor(list(rows), dtype=torch.long, device=device) for rows in row_sets]  # [R_i]
        self.totals: list[list[torch.Tensor | None]] = [[None] * shape.n_layers for _ in row_sets]  # [H, N] each
        self._handles: list = []
        self._owner: int | None = None  # the thread that entered the block: only its forwards are recorded

    def _hook_for(self, layer: int):
        every = torch.cat(self.row_ts)  # [sum R_i] the queries of all sets in one projection

        def hook(module, args, kwargs):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]  # [1, N, D]
            # Another thread's forward on the shared model is not this block's; a layer run again (recomputed in a
            # gradient pass's backward, on the same input) was recorded the first time it ran.
            if (threading.get_ident() != self._owner or hidden.shape[0] != 1 or hidden.shape[1] != self.n_tokens
                    or self.totals[0][layer] is not None):
                return
            with torch.no_grad():  # also inside a gradient pass (the first highlight's): no graph of its own
                q, k = _queries_keys(module, self.family, hidden.detach(), every, kwargs)  # [H, sum R, d], [H, N, d]
                at = 0
                for i, r in enumerate(self.row_ts):
                    self.totals[i][layer] = column_attention(q[:, at:at + len(r)], k, r, float(module.scaling))  # [H, N]
                    at += len(r)
        return hook

    def __enter__(self) -> "AttentionRecorder":
        self._owner = threading.get_ident()
        modules = _attention_modules(self.model, self.shape.model_type)
        self._handles = [m.register_forward_pre_hook(self._hook_for(i), with_kwargs=True) for i, m in enumerate(modules)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    @property
    def complete(self) -> bool:
        """Whether a forward over the n_tokens positions was recorded in every layer."""
        return all(t is not None for per in self.totals for t in per)

    def features(self, i: int, segment_tokens: Sequence[Sequence[int]]) -> np.ndarray:
        """<float32>[S, L * H] of row set i (layer-major), as capture_features."""
        if not self.complete:
            raise SalienceError("No forward over the whole prompt + target was recorded. Fix: run the model's forward "
                                "inside the recorder's block.")
        first = self.totals[i][0]
        indicator = torch.zeros(len(segment_tokens), self.n_tokens, dtype=first.dtype, device=first.device)  # [S, N]
        for s, toks in enumerate(segment_tokens):
            indicator[s, torch.as_tensor(list(toks), dtype=torch.long, device=first.device)] = 1.0
        per_layer = [indicator @ t.T for t in self.totals[i]]  # L x [S, H]
        return torch.cat([o.float().cpu() for o in per_layer], dim=1).numpy()  # [S, L*H]


def span_rows(n_prompt_tokens: int, span: tuple[int, int]) -> list[int]:
    """The query positions whose logits predict target tokens span[0]..span[1]-1 (the token before each)."""
    t0, t1 = span
    return [n_prompt_tokens + t - 1 for t in range(t0, t1)]
