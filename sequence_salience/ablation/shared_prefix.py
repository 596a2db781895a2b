"""Attention of a batch of edited rows over one shared, uncopied prefix (issue 42 §4).

With a transformers `DynamicCache`, every row of a batch that reuses the unedited prompt's prefix gets
its own copy of the prefix's keys and values in every layer (`DynamicCache.update` concatenates the
prefix with the row's new keys), so a batch of B rows writes B copies of the prefix per forward and holds
them at once. Here the prefix part of attention is computed once for every query of the batch against the
one cached prefix, and the row's own causal part apart; the two are merged exactly by their
log-sum-exp (the split of a softmax over two key sets, as in flash attention):

    out = (e^{lse_p} out_p + e^{lse_s} out_s) / (e^{lse_p} + e^{lse_s})

where out_p, lse_p are attention over the prefix keys alone and out_s, lse_s over the row's own keys
(causal). Right-padded rows need no mask: a real token only sees earlier positions of its row, which
are real. No key/value cache is passed to the model; positions continue after the prefix.

Used through `prefix_attention`, which switches the model to this attention for one forward (the model
lock serializes every use of the model in the server; the CLI and notebooks run one forward at a time).

`packed_attention` (PACKED_NAME) is the same attention for rows that start at different positions, packed into one
sequence without padding (PrefixScorer's packed batches): every query sees the prefix up to its own row's start and
its own row's earlier positions (a boolean mask <[Q, P + Q]>, `packed_mask`), in one masked softmax over the prefix
and the packed keys. On a short prompt a forward costs about 0.09 s whatever its length (the weights are read once per
forward: 10 positions 0.10 s, 120 positions 0.25 s, one thread, the default model), and leave one out's rows start
at every segment, so one packed forward replaces a forward per start (docs/benchmarks.md, "Session 34 (h2)").
Families whose attention goes through transformers' attention interface with the query, key and value
of the new positions only (Llama, Qwen2, Mistral, Gemma, GPT-2: `SUPPORTED`); others keep the cache path.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

NAME = "sequence_salience_shared_prefix"
PACKED_NAME = "sequence_salience_packed_prefix"

# model_type values whose attention modules call ALL_ATTENTION_FUNCTIONS with the new positions' q, k, v
# (post-rotary) and a `layer_idx`; the equality with the cache path is tested per family (tests/unit).
SUPPORTED = frozenset({"llama", "qwen2", "mistral", "gemma", "gemma2", "gpt2"})

_registered = threading.Lock()
_done = False


def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None):
    """(out <float>[B, H, Q, Dh], lse <float32>[B, H, Q]) of softmax(q k^T scale) v: torch's CPU flash kernel,
    which returns the log-sum-exp; elsewhere (float64: the tiny test models; other devices) the same by explicit
    scores in the inputs' dtype."""
    if q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16, torch.float16):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
        return out, lse
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)  # [B, H, Q, K]
    if causal:
        Q, K = s.shape[-2:]
        s = s.masked_fill(torch.ones(Q, K, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [B, H, Q]
    return (torch.softmax(s, dim=-1).to(v.dtype) @ v), lse


def attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask=None,
              scaling: float | None = None, dropout: float = 0.0, shared_prefix=None, **kwargs):
    """The attention interface of transformers (returns (<float>[B, Q, H, Dh], None)).

    query <float>[B, H, Q, Dh]: the rows' new positions; key, value <float>[B, Hkv, Q, Dh]: theirs;
    shared_prefix: per layer (keys, values), each <float>[1, Hkv, P, Dh], the unedited prefix (post-rotary).
    """
    kp, vp = shared_prefix[module.layer_idx]
    B, H, Q, D = query.shape
    Hkv = key.shape[1]
    g = H // Hkv
    # Prefix part: every query of every row sees all P prefix keys, so batch and group fold into the query
    # length and the one prefix is read once, never copied.
    q = query.reshape(B, Hkv, g, Q, D).permute(1, 0, 2, 3, 4).reshape(1, Hkv, B * g * Q, D)
    out_p, lse_p = flash(q, kp.to(query.dtype), vp.to(query.dtype), False, scaling)  # [1, Hkv, BgQ, D], [1, Hkv, BgQ]
    out_p = out_p.reshape(Hkv, B, g, Q, D).permute(1, 0, 2, 3, 4).reshape(B, H, Q, D)
    lse_p = lse_p.reshape(Hkv, B, g, Q).permute(1, 0, 2, 3).reshape(B, H, Q)
    # Own part: causal over the row's new positions (right padding comes after every real token).
    k_own = key.repeat_interleave(g, dim=1) if g > 1 else key  # [B, H, Q, D]
    v_own = value.repeat_interleave(g, dim=1) if g > 1 else value
    out_s, lse_s = flash(query, k_own, v_own, True, scaling)  # [B, H, Q, D], [B, H, Q]
    m = torch.maximum(lse_p, lse_s)
    wp, ws = torch.exp(lse_p - m), torch.exp(lse_s - m)  # [B, H, Q]
    out = (out_p * wp.unsqueeze(-1) + out_s * ws.unsqueeze(-1)) / (wp + ws).unsqueeze(-1)  # [B, H, Q, D]
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


def packed_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask=None,
                     scaling: float | None = None, dropout: float = 0.0, packed_prefix=None, **kwargs):
    """The attention interface of transformers for packed rows (returns (<float>[1, Q, H, Dh], None)).

    query <float>[1, H, Q, Dh]: the packed rows' new positions; key, value <float>[1, Hkv, Q, Dh]: theirs;
    packed_prefix: (per layer (keys, values) each <float>[1, Hkv, P, Dh] of the unedited prefix (post-rotary),
    <bool>[Q, P + Q] which prefix and packed keys each query sees: `packed_mask`).
    """
    layers, allowed = packed_prefix
    kp, vp = layers[module.layer_idx]
    keys = torch.cat([kp.to(query.dtype), key], dim=2)  # [1, Hkv, P + Q, Dh]
    values = torch.cat([vp.to(query.dtype), value], dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=allowed, scale=scaling,
                                                           enable_gqa=query.shape[1] != key.shape[1])  # [1, H, Q, Dh]
    return out.transpose(1, 2).contiguous(), None


def packed_mask(starts: torch.Tensor, lengths: torch.Tensor, prefix: int) -> torch.Tensor:
    """<bool>[Q, prefix + Q] of rows packed one after another (row b: `lengths[b]` positions from `starts[b]` on,
    Q = their sum): a query sees the prefix before its row's start and its own row's positions up to its own."""
    row = torch.repeat_interleave(torch.arange(len(lengths)), lengths)  # [Q] the row of each packed position
    pos = torch.cat([s + torch.arange(n) for s, n in zip(starts.tolist(), lengths.tolist())])  # [Q] its position
    sees_prefix = torch.arange(prefix)[None, :] < starts[row][:, None]  # [Q, prefix]
    sees_own = (row[:, None] == row[None, :]) & (pos[None, :] <= pos[:, None])  # [Q, Q]
    return torch.cat([sees_prefix, sees_own], dim=1)


def register() -> None:
    """Registers `attention` under NAME and `packed_attention` under PACKED_NAME with transformers (once per
    process)."""
    global _done  # pylint: disable=global-statement
    with _registered:
        if not _done:
            from transformers import AttentionInterface  # pylint: disable=import-outside-toplevel

            AttentionInterface.register(NAME, attention)
            AttentionInterface.register(PACKED_NAME, packed_attention)
            _done = True


def supported(model) -> bool:
    """Whether `model`'s family takes the shared-prefix attention (SUPPORTED, transformers' interface)."""
    return getattr(getattr(model, "config", None), "model_type", None) in SUPPORTED


@contextlib.contextmanager
def prefix_attention(model, name: str = NAME) -> Iterator[None]:
    """The model's attention is `attention` (or PACKED_NAME's `packed_attention`) inside the block, its own again
    after (also on error)."""
    register()
    config = model.config
    before = config._attn_implementation  # pylint: disable=protected-access
    config._attn_implementation = name  # pylint: disable=protected-access
    try:
        yield
    finally:
        config._attn_implementation = before  # pylint: disable=protected-access


def layer_prefix(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], start: int):
    """Per layer (keys, values) <float>[1, Hkv, start, Dh] of the unedited row's first `start` positions (views)."""
    return [(k[:, :, :start], v[:, :, :start]) for k, v in layers]
