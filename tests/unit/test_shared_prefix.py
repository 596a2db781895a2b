"""Attention over one shared, uncopied prefix (sequence_salience/ablation/shared_prefix.py).

The prefix part and the row's own causal part, merged by their log-sum-exp, must equal softmax attention
over the concatenated keys; and PrefixScorer with it must give the numbers of its former DynamicCache path
and of plain full forwards, in float32 (torch's CPU flash kernel, as the default model runs) and float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sequence_salience.ablation import PrefixScorer, shared_prefix
from tests.unit.tiny_models import MODEL_BUILDERS, wrap


class Layer(torch.nn.Module):
    layer_idx = 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("group", [1, 3])
def test_merged_attention_equals_softmax_over_prefix_and_own_keys(dtype, group):
    g = torch.Generator().manual_seed(group)
    B, Hkv, P, Q, D = 3, 2, 7, 5, 8
    H = Hkv * group
    q = torch.randn(B, H, Q, D, generator=g, dtype=dtype)
    k, v = torch.randn(B, Hkv, Q, D, generator=g, dtype=dtype), torch.randn(B, Hkv, Q, D, generator=g, dtype=dtype)
    kp, vp = torch.randn(1, Hkv, P, D, generator=g, dtype=dtype), torch.randn(1, Hkv, P, D, generator=g, dtype=dtype)
    out, _ = shared_prefix.attention(Layer(), q, k, v, scaling=0.3, shared_prefix=[(kp, vp)])  # [B, Q, H, D]
    # Reference, written out: keys = prefix then own, each query sees the prefix and its own earlier positions.
    keys = torch.cat([kp.expand(B, -1, -1, -1), k], dim=2).repeat_interleave(group, dim=1)  # [B, H, P+Q, D]
    values = torch.cat([vp.expand(B, -1, -1, -1), v], dim=2).repeat_interleave(group, dim=1)
    scores = (q @ keys.transpose(-1, -2)) * 0.3  # [B, H, Q, P+Q]
    allowed = torch.ones(Q, P + Q, dtype=torch.bool)
    allowed[:, P:] = torch.ones(Q, Q, dtype=torch.bool).tril()
    want = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ values  # [B, H, Q, D]
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out, want.transpose(1, 2), atol=tol, rtol=tol)


@pytest.mark.parametrize("family", sorted(MODEL_BUILDERS))
def test_prefix_scorer_in_float32_equals_its_cache_path_and_plain_forwards(family):
    model = MODEL_BUILDERS[family]().float()
    lm = wrap(model, family)
    assert shared_prefix.supported(lm.model)
    rng = np.random.default_rng(0)
    prompt = [int(i) for i in rng.integers(5, 40, size=40)]
    target = [int(i) for i in rng.integers(5, 40, size=6)]
    edited = []
    for at in (3, 17, 30, 38):
        row = list(prompt)
        row[at] = 4
        edited.append(row)
    edited.append(prompt[:10] + prompt[12:])  # a deletion: shorter row, right-padded in its batch
    for filler in (5, 6, 7):  # rows that change the same position: one batch of three over the shared prefix
        row = list(prompt)
        row[20] = filler
        edited.append(row)
    edited.append(prompt[:20] + prompt[22:])  # and a shorter one starting there too: padded in that batch
    shared = PrefixScorer(lm, prompt, target, (0, 6), batch_size=8, packing=False)
    assert shared.shared_prefix
    copied = PrefixScorer(lm, prompt, target, (0, 6), batch_size=8, shared_attention=False)
    packed = PrefixScorer(lm, prompt, target, (0, 6), batch_size=8)
    plain = PrefixScorer(lm, prompt, target, (0, 6), reuse=False)
    got, via_cache, via_packing, want = shared(edited), copied(edited), packed(edited), plain(edited)
    np.testing.assert_allclose(got, via_cache, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(via_packing, want, rtol=0, atol=1e-5)
    assert shared.stats.computed == copied.stats.computed < plain.stats.computed
    assert shared.stats.shared_batches >= 1 and copied.stats.shared_batches == 0
    # packed: each row from its own first changed token (no padding to a batch's shortest prefix), 9 rows in 2 forwards
    own = sum(len(r) + len(target) - min(next(i for i, (a, b) in enumerate(zip(r, prompt)) if a != b), len(r) - 1)
              for r in edited) + len(prompt) + len(target)
    assert packed.stats.computed == own < shared.stats.computed
    assert packed.stats.packed_batches == 2 and shared.stats.packed_batches == 0
    assert lm.model.config._attn_implementation not in (shared_prefix.NAME, shared_prefix.PACKED_NAME)  # pylint: disable=protected-access


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_packed_attention_equals_each_rows_softmax_over_its_prefix_and_own_keys(dtype):
    """Rows packed one after another, starting at 3, 0 and 5 over a 6-position prefix: each query's output is the
    softmax attention over the prefix before its row's start and its own row's positions up to its own, written
    out row by row (grouped-query attention: 4 query heads over 2 key heads)."""
    g = torch.Generator().manual_seed(0)
    Hkv, group, P, D = 2, 2, 6, 8
    H = Hkv * group
    starts, lengths = torch.tensor([3, 0, 5]), torch.tensor([4, 2, 3])
    Q = int(lengths.sum())
    q = torch.randn(1, H, Q, D, generator=g, dtype=dtype)
    k, v = torch.randn(1, Hkv, Q, D, generator=g, dtype=dtype), torch.randn(1, Hkv, Q, D, generator=g, dtype=dtype)
    kp, vp = torch.randn(1, Hkv, P, D, generator=g, dtype=dtype), torch.randn(1, Hkv, P, D, generator=g, dtype=dtype)
    mask = shared_prefix.packed_mask(starts, lengths, P)
    out, _ = shared_prefix.packed_attention(Layer(), q, k, v, scaling=0.3, packed_prefix=([(kp, vp)], mask))
    at = 0
    for s, n in zip(starts.tolist(), lengths.tolist()):
        keys = torch.cat([kp[:, :, :s], k[:, :, at:at + n]], dim=2).repeat_interleave(group, dim=1)  # [1, H, s+n, D]
        values = torch.cat([vp[:, :, :s], v[:, :, at:at + n]], dim=2).repeat_interleave(group, dim=1)
        scores = (q[:, :, at:at + n] @ keys.transpose(-1, -2)) * 0.3  # [1, H, n, s+n]
        allowed = torch.ones(n, s + n, dtype=torch.bool)
        allowed[:, s:] = torch.ones(n, n, dtype=torch.bool).tril()
        want = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ values  # [1, H, n, D]
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(out[:, at:at + n], want.transpose(1, 2), atol=tol, rtol=tol)
        at += n


def test_the_models_own_attention_is_back_after_an_error():
    lm = wrap(MODEL_BUILDERS["llama"]().float(), "llama")
    before = lm.model.config._attn_implementation  # pylint: disable=protected-access
    with pytest.raises(RuntimeError):
        with shared_prefix.prefix_attention(lm.model):
            assert lm.model.config._attn_implementation == shared_prefix.NAME  # pylint: disable=protected-access
            raise RuntimeError("inside")
    assert lm.model.config._attn_implementation == before  # pylint: disable=protected-access
