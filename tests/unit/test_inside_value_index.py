"""The value-vector projection index on tiny random models: contents, search, disk cache, a build layer by layer."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import sequence_salience as ss
from sequence_salience import inside
from sequence_salience.inside import value_index as vi
from tests.unit.tiny_models import tiny_tokenizer

TOP_K = 5


@pytest.fixture()
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path))
    return tmp_path


def test_index_holds_the_top_tokens_of_every_value(tiny_lm, cache):
    calls = []
    index = inside.get_value_index(tiny_lm, top_k=TOP_K, progress=lambda d, n: calls.append((d, n)))
    arch = inside.resolve_architecture(tiny_lm.model)
    assert index.top_ids.shape == (2, arch.ffn_size, TOP_K) and index.complete
    assert calls == [(1, 2), (2, 2)]
    emb = arch.unembedding_matrix()
    for layer in range(2):
        proj = (arch.value_matrix(layer) @ emb.T)  # [F, V], brute force
        expected = torch.topk(proj, TOP_K, dim=-1)
        np.testing.assert_array_equal(index.top_ids[layer], expected.indices.numpy())
        np.testing.assert_allclose(index.top_scores[layer], expected.values.numpy(), rtol=2e-3, atol=2e-3)


def test_search_finds_the_values_that_rank_a_word_highest(tiny_lm, cache):
    index = inside.get_value_index(tiny_lm, top_k=TOP_K)
    tok = tiny_tokenizer()
    # A value of layer 1 whose top token is a word (a typed query is stripped of spaces).
    value = next(f for f in range(index.top_ids.shape[1])
                 if tok.decode([int(index.top_ids[1, f, 0])]).strip().isalpha())
    token_id = int(index.top_ids[1, value, 0])
    word = tok.decode([token_id]).strip()
    result = inside.search_values(tiny_lm, index, word, limit=1000)
    assert token_id in [i for i, _ in result.tokens]
    assert any(h.layer == 1 and h.index == value and h.rank == 0 for h in result.hits)
    # Independent count: every (layer, value, rank) whose top-k holds one of the query tokens.
    ids = [i for i, _ in result.tokens]
    assert result.total == int(np.isin(index.top_ids, ids).sum())
    ranks = [h.rank for h in result.hits]
    assert ranks == sorted(ranks)
    for h in result.hits:
        assert int(index.top_ids[h.layer, h.index, h.rank]) == h.token_id
    assert result.layers_searched == result.num_layers == 2
    with pytest.raises(ss.SalienceError, match="search text is empty"):
        inside.search_values(tiny_lm, index, "   ")


def test_query_tokens_take_both_spellings():
    tok = tiny_tokenizer()
    # In the tiny vocabulary "is" and " is" are single tokens (263, 266); "apples" is two pieces
    # but " apples" is one (298): single tokens win; "capital" has none, so first pieces are used.
    assert vi.query_tokens(tok, " is ") == ((263, "is"), (266, " is"))
    assert vi.query_tokens(tok, "apples") == ((298, " apples"),)
    assert vi.query_tokens(tok, "capital") == ((278, tok.decode([278])), (292, tok.decode([292])))


def test_index_is_cached_on_disk_atomically_and_keyed_by_the_weights(tiny_lm, cache, monkeypatch):
    first = inside.get_value_index(tiny_lm, top_k=TOP_K)
    path = inside.index_path(first.key, TOP_K)
    assert path.is_file() and path.parent == cache / "value_index"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind

    def no_build(*a, **k):
        raise AssertionError("rebuilt although the cache holds the index")

    monkeypatch.setattr(vi, "build_value_index", no_build)
    again = inside.get_value_index(tiny_lm, top_k=TOP_K)
    np.testing.assert_array_equal(again.top_ids, first.top_ids)
    monkeypatch.undo()
    # Another model (changed weights) gets another key and its own file.
    other = copy.deepcopy(tiny_lm.model)
    with torch.no_grad():
        inside.resolve_architecture(other).value_matrix(0)[0] += 1.0
    other_lm = ss.from_modules(other, tiny_tokenizer(), name="edited")
    assert inside.model_identity(other_lm) != first.key
    # A file of another model at this path is not trusted.
    assert inside.load_value_index(path, key="someone-else") is None


def test_corrupt_cache_file_is_rebuilt(tiny_lm, cache):
    key = inside.model_identity(tiny_lm)
    path = inside.index_path(key, TOP_K)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a zip file")
    index = inside.get_value_index(tiny_lm, top_k=TOP_K)
    assert index.complete and inside.load_value_index(path, key) is not None


def test_a_build_hands_over_each_layer_and_serves_partial_searches(tiny_lm, cache):
    layers = []
    built = inside.get_value_index(tiny_lm, top_k=TOP_K, on_layer=layers.append)
    assert [ix.layers_built for ix in layers] == [1, 2] and built.complete
    reference = inside.get_value_index(tiny_lm, top_k=TOP_K, on_layer=layers.append)  # loaded from the file
    assert len(layers) == 2  # a load builds no layer
    snap = layers[-1]
    np.testing.assert_array_equal(snap.top_ids, reference.top_ids)
    # A partial snapshot searches only its built layers: a token in the top-k of values of both
    # layers is found in both by the whole index, and in layer 0 alone (every place) by the partial one.
    partial = layers[0]
    both = sorted(set(snap.top_ids[0].ravel().tolist()) & set(snap.top_ids[1].ravel().tolist()))
    assert both, "no token is in a top-k of both layers"
    token_id = both[0]
    assert set(snap.lookup([token_id])[:, 0].tolist()) == {0, 1}
    hits = partial.lookup([token_id])
    assert hits.shape == (int((snap.top_ids[0] == token_id).sum()), 3) and len(hits) > 0
    assert set(hits[:, 0].tolist()) == {0}


def test_cancelled_build_stops_between_layers_and_writes_nothing(tiny_lm, cache):
    layers = []
    with pytest.raises(ss.ComputationCancelled, match="after 1 of 2 layers"):
        inside.build_value_index(tiny_lm, TOP_K, cancel=lambda: len(layers) == 1, on_layer=layers.append)
    assert [ix.layers_built for ix in layers] == [1]
    assert not (cache / "value_index").exists() or not any((cache / "value_index").iterdir())


def test_trace_reads_value_tokens_from_a_full_or_partial_index(tiny_lm, cache):
    from sequence_salience.inside.trace import sequence_ids

    index = inside.get_value_index(tiny_lm, top_k=TOP_K)
    ids, n_prompt = sequence_ids(tiny_lm, "The capital of France is", " Paris.")
    config = inside.TraceConfig(top_sub_updates=6, value_top_tokens=4)
    plain = inside.trace_ids(tiny_lm, ids, n_prompt, None, config)
    partial = vi.ValueIndex(index.key, index.top_ids, index.top_scores, layers_built=1)
    for idx in (index, partial):
        got = inside.trace_ids(tiny_lm, ids, n_prompt, None, config, index=idx)
        assert [[s.top_ids for s in l.sub_updates] for l in got.layers] == \
            [[s.top_ids for s in l.sub_updates] for l in plain.layers]


def test_projection_ranking_equals_a_brute_force_over_every_value(tiny_lm, cache):
    """search_by_projection vs. a brute force: every value's (E v)[token] from the weights, by hand
    (rows of GPT-2's c_proj.weight, columns of Llama's down_proj.weight; E = lm_head.weight)."""
    model = tiny_lm.model
    layers = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    E = model.get_output_embeddings().weight.detach().double()  # [V, D]
    res = inside.search_by_projection(tiny_lm, "Paris", limit=10)
    assert res.ranking == "projection" and res.layers_searched == len(layers)
    q = [i for i, _ in res.tokens]
    rows = []
    for l, layer in enumerate(layers):
        mlp = layer.mlp
        values = mlp.c_proj.weight.detach().double() if hasattr(mlp, "c_proj") else mlp.down_proj.weight.detach().double().T
        proj = values @ E.T  # [F, V]
        for j in range(values.shape[0]):
            tok = max(q, key=lambda t: proj[j, t])
            rank = int((proj[j] > proj[j, tok]).sum())
            rows.append((float(proj[j, tok]), l, j, tok, rank))
    rows.sort(key=lambda r: -r[0])
    assert res.total == len(rows)
    assert [(h.layer, h.index, h.token_id) for h in res.hits] == [(l, j, t) for _, l, j, t, _ in rows[:10]]
    for h, (score, _, _, _, rank) in zip(res.hits, rows):
        assert h.score == pytest.approx(score, rel=1e-5) and h.rank == rank
    # Strong promoters outside a value's top 2 are still found by the projection ranking.
    index = vi.build_value_index(tiny_lm, top_k=2)
    in_top = {(h.layer, h.index) for h in inside.search_values(tiny_lm, index, "Paris", limit=10_000).hits}
    assert any((h.layer, h.index) not in in_top for h in res.hits)
