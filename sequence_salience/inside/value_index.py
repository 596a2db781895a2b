"""Search value vectors by token: a projection index over every FFN value of every layer.

The index stores, for each value vector v of each layer, the `top_k` tokens
with the largest E v (E = the unembedding) and their scores. A search for a
word looks up which values rank its token(s) highest (rank 0 first). No
external service: the index is a NumPy file.

It is built once per model and cached on disk under
``cache_dir()/value_index/<identity>-k<top_k>.npz`` (beside the converted
models of `sequence_salience.model`), written under a temporary name and
renamed into place, and keyed by the model's identity: a hash of its config
and of exactly the weights the index depends on (the unembedding and every
output projection). `get_value_index` loads it or builds it layer by layer
(`build_value_index`: a progress callback, a cancel check between layers, each
built layer handed over so that searches answer from the layers built so far);
a server runs that as one job of its job table (lit_app/model/value_index.py).

Two rankings for a search (`RANKINGS`):

* ``top_k`` (`search_values`, from the index): the values whose top-k tokens contain the
  query token, best rank first, then by score;
* ``projection`` (`search_by_projection`, no index needed): EVERY value of every layer
  ranked by the query token's projection score (E v)[token], highest first, so the
  strongest promoters are found even when the token is not in their top k (one [F, D] x [D]
  product per layer). A hit's `rank` is then the token's rank in that value's full projection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any, ContextManager

import numpy as np
import torch

from sequence_salience.errors import ComputationCancelled, SalienceError
from sequence_salience.files import atomic_write_bytes
from sequence_salience.inside.architectures import Architecture, resolve_architecture
from sequence_salience.inside.trace import plain
from sequence_salience.model import LanguageModel, cache_dir

logger = logging.getLogger(__name__)

INDEX_VERSION = 1
DEFAULT_TOP_K = 32
RANKINGS = ("top_k", "projection")
# Largest [V, chunk] block of projection scores computed at once (floats).
_MAX_BLOCK = 1 << 25

# progress(layers_done, num_layers)
Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True)
class ValueHit:
    """A value vector whose projection ranks a query token highly.

    Attributes:
      layer / index: the value vector.
      token_id / token: the matched query token.
      rank: the token's rank in the value's projection (0 = its top token).
      score: (E v)[token].
      top_tokens: the value's own top tokens (from the index).
    """

    layer: int
    index: int
    token_id: int
    token: str
    rank: int
    score: float
    top_tokens: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """Hits for a query, best first, and what was searched.

    Attributes:
      query: the text searched.
      tokens: (id, string) of the query tokens looked up.
      hits: "top_k": ranked by rank in the value's projection, then by score; "projection":
        by the score (E v)[token], highest first.
      total: number of matches before `limit` (every value for "projection").
      layers_searched: layers searched (of the index while it builds; all for "projection").
      num_layers: layers of the model.
      ranking: "top_k" or "projection" (module docstring).
    """

    query: str
    tokens: tuple[tuple[int, str], ...]
    hits: tuple[ValueHit, ...]
    total: int
    layers_searched: int
    num_layers: int
    ranking: str = "top_k"

    def as_dict(self) -> dict:
        return plain(dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True, eq=False)
class ValueIndex:
    """Top tokens of every value vector: <int32>[L, F, K] ids and <float16>[L, F, K] scores.

    Only the first `layers_built` layers are filled while a build is running.
    """

    key: str
    top_ids: np.ndarray
    top_scores: np.ndarray
    layers_built: int

    @property
    def num_layers(self) -> int:
        return int(self.top_ids.shape[0])

    @property
    def top_k(self) -> int:
        return int(self.top_ids.shape[2])

    @property
    def complete(self) -> bool:
        return self.layers_built == self.num_layers

    @property
    def nbytes(self) -> int:
        return int(self.top_ids.nbytes + self.top_scores.nbytes)

    def lookup(self, token_ids: Sequence[int]) -> np.ndarray:
        """<int64>[M, 3] (layer, index, rank) of every value whose top-k has one of `token_ids`, best first."""
        n = self.layers_built
        ids = self.top_ids[:n]  # [n, F, K]
        hits = np.argwhere(np.isin(ids, np.asarray(list(token_ids), dtype=ids.dtype)))  # [M, 3]
        if len(hits) == 0:
            return hits.astype(np.int64)
        scores = self.top_scores[hits[:, 0], hits[:, 1], hits[:, 2]].astype(np.float32)
        order = np.lexsort((-scores, hits[:, 2]))  # rank first, then score
        return hits[order].astype(np.int64)


def model_identity(lm: LanguageModel, arch: Architecture | None = None) -> str:
    """A hash of the model's config and of the weights the index reads (unembedding and output projections)."""
    arch = arch or resolve_architecture(lm.model)
    h = hashlib.blake2b(digest_size=12)
    cfg = getattr(lm.model, "config", None)
    h.update((cfg.to_json_string(use_diff=False) if cfg is not None else type(lm.model).__name__).encode())
    tensors = [arch.unembedding_matrix()] + [m.weight for m in arch.ffn_outs]
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().data if t.dtype != torch.bool else t.numpy().tobytes())
    return f"{arch.family.split()[0]}-{h.hexdigest()}"


def index_path(key: str, top_k: int = DEFAULT_TOP_K, directory: pathlib.Path | None = None) -> pathlib.Path:
    """Where the index of model `key` lives (cache_dir()/value_index unless `directory` is given)."""
    return (directory or cache_dir() / "value_index") / f"{key}-k{top_k}-v{INDEX_VERSION}.npz"


@torch.no_grad()
def build_layer(arch: Architecture, layer: int, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids <int32>[F, K], scores <float16>[F, K]): the top-k tokens of E v for every value of one layer."""
    emb = arch.unembedding_matrix()  # [V, D]
    values = arch.value_matrix(layer)  # [F, D] (project() moves it to the unembedding's device and dtype)
    vocab, f = emb.shape[0], values.shape[0]
    k = min(top_k, vocab)
    chunk = max(1, _MAX_BLOCK // vocab)
    ids = np.empty((f, k), dtype=np.int32)
    scores = np.empty((f, k), dtype=np.float16)
    for s in range(0, f, chunk):
        block = arch.project(values[s:s + chunk]).float()  # [c, V] (row-major: top-k along contiguous rows)
        top = torch.topk(block, k, dim=-1)  # [c, K]
        ids[s:s + chunk] = top.indices.cpu().numpy()
        scores[s:s + chunk] = top.values.cpu().numpy().astype(np.float16)
    return ids, scores


def _write_atomic(path: pathlib.Path, index: ValueIndex, meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, top_ids=index.top_ids, top_scores=index.top_scores, meta=np.asarray(json.dumps(meta)))
    atomic_write_bytes(path, buf.getvalue())


def load_value_index(path: pathlib.Path, key: str | None = None) -> ValueIndex | None:
    """The index stored at `path`, or None when absent, unreadable or of another model/version."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("version") != INDEX_VERSION or (key is not None and meta.get("key") != key):
                return None
            top_ids, top_scores = z["top_ids"], z["top_scores"]
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        if not isinstance(e, FileNotFoundError):
            logger.warning("Ignoring unreadable value index %s (%s); it will be rebuilt.", path, e)
        return None
    return ValueIndex(meta["key"], top_ids, top_scores, layers_built=int(top_ids.shape[0]))


def build_value_index(
    lm: LanguageModel,
    top_k: int = DEFAULT_TOP_K,
    progress: Progress | None = None,
    path: pathlib.Path | None = None,
    cancel: Callable[[], bool] | None = None,
    on_layer: Callable[[ValueIndex], None] | None = None,
    hold: Callable[[], ContextManager[Any]] | None = None,
) -> ValueIndex:
    """Builds the index for every layer and writes it to `path` (default: `index_path`), atomically.

    Args:
      lm: a loaded model.
      top_k: tokens kept per value vector.
      progress: progress(layers_done, num_layers) after each layer.
      path: where to write; None uses the cache directory.
      cancel: checked before each layer (inside `hold`); True stops the build (raises ComputationCancelled; nothing is written).
      on_layer: called after each layer with the index of the layers built so far (searchable meanwhile).
      hold: optional; each layer is built inside `with hold():` (a server passes its
        scheduler's background turn, so that requests people wait for run between layers).
    """
    if top_k < 1:
        raise SalienceError(f"top_k={top_k}; it must be at least 1.")
    arch = resolve_architecture(lm.model)
    key = model_identity(lm, arch)
    path = path or index_path(key, top_k)
    n, f = arch.num_layers, arch.ffn_size
    k = min(top_k, arch.unembedding_matrix().shape[0])
    top_ids = np.zeros((n, f, k), dtype=np.int32)
    top_scores = np.zeros((n, f, k), dtype=np.float16)
    start = time.perf_counter()
    for layer in range(n):
        with hold() if hold is not None else contextlib.nullcontext():
            if cancel is not None and cancel():  # asked once the turn came: a cancel sent meanwhile counts
                raise ComputationCancelled(f"The value-index build was cancelled after {layer} of {n} layers.")
            top_ids[layer], top_scores[layer] = build_layer(arch, layer, k)
        if on_layer is not None:
            on_layer(ValueIndex(key, top_ids, top_scores, layer + 1))
        if progress is not None:
            progress(layer + 1, n)
    index = ValueIndex(key, top_ids, top_scores, n)
    meta = {"version": INDEX_VERSION, "key": key, "top_k": k, "num_layers": n, "ffn_size": f,
            "family": arch.family, "model": lm.name, "build_seconds": round(time.perf_counter() - start, 3)}
    _write_atomic(path, index, meta)
    logger.info("Value index of %s: %d x %d values, top %d, built in %.1f s, %s (%.1f MB).",
                lm.name, n, f, k, time.perf_counter() - start, path, path.stat().st_size / 1e6)
    return index


def get_value_index(lm: LanguageModel, top_k: int = DEFAULT_TOP_K, progress: Progress | None = None,
                    directory: pathlib.Path | None = None, cancel: Callable[[], bool] | None = None,
                    on_layer: Callable[[ValueIndex], None] | None = None,
                    hold: Callable[[], ContextManager[Any]] | None = None) -> ValueIndex:
    """The cached index of this model, built (and cached) on first use (`build_value_index`'s arguments)."""
    key = model_identity(lm)
    path = index_path(key, top_k, directory)
    index = load_value_index(path, key)
    if index is None:
        index = build_value_index(lm, top_k, progress, path, cancel, on_layer, hold)
    elif progress is not None:
        progress(index.num_layers, index.num_layers)
    return index


def query_tokens(tokenizer, query: str) -> tuple[tuple[int, str], ...]:
    """The token(s) a typed word stands for: the single tokens among "word" and " word" (as typed).

    A word that is no single token uses the first token of each spelling.
    """
    q = query.strip()
    if not q:
        raise SalienceError("The search text is empty. Fix: type a word, e.g. Paris.")
    found: dict[int, str] = {}
    firsts: dict[int, str] = {}
    for variant in (q, " " + q):
        ids = tokenizer(variant, add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            found.setdefault(int(ids[0]), tokenizer.decode([ids[0]]))
        elif ids:
            firsts.setdefault(int(ids[0]), tokenizer.decode([ids[0]]))
    return tuple((found or firsts).items())


def search_values(lm: LanguageModel, index: ValueIndex, query: str, limit: int = 20) -> SearchResult:
    """Value vectors whose vocabulary projection ranks the query's token(s) highest (rank 0 first)."""
    if limit < 1:
        raise SalienceError(f"limit={limit}; it must be at least 1.")
    tokens = query_tokens(lm.tokenizer, query)
    names = dict(tokens)
    found = index.lookup([i for i, _ in tokens])
    hits = []
    cache: dict[int, str] = {}

    def decode(i: int) -> str:
        if i not in cache:
            cache[i] = lm.tokenizer.decode([i])
        return cache[i]

    for layer, idx, rank in found[:limit]:
        tok = int(index.top_ids[layer, idx, rank])
        hits.append(ValueHit(
            layer=int(layer), index=int(idx), token_id=tok, token=names.get(tok, decode(tok)), rank=int(rank),
            score=float(index.top_scores[layer, idx, rank]),
            top_tokens=tuple(decode(int(t)) for t in index.top_ids[layer, idx, :8]),
        ))
    return SearchResult(query, tokens, tuple(hits), len(found), index.layers_built, index.num_layers)


def search_by_projection(lm: LanguageModel, query: str, limit: int = 20,
                         arch: Architecture | None = None) -> SearchResult:
    """Every value vector ranked by its projection score (E v)[token] for the query's token(s), highest first.

    With several query tokens (" Paris" and "Paris") a value's score is its largest over them.
    No index: one [F, D] x [D, Q] product per layer, then the full projection of the `limit`
    hits only (for each hit's rank and top tokens).
    """
    if limit < 1:
        raise SalienceError(f"limit={limit}; it must be at least 1.")
    arch = arch or resolve_architecture(lm.model)
    tokens = query_tokens(lm.tokenizer, query)
    names = dict(tokens)
    emb = arch.unembedding_matrix()  # [V, D]
    q_ids = torch.tensor([i for i, _ in tokens], device=emb.device)
    q = emb[q_ids].float()  # [Q, D]
    with torch.no_grad():
        per_layer = []
        for layer in range(arch.num_layers):
            v = arch.value_matrix(layer).to(emb.device).float()  # [F, D]
            per_layer.append(v @ q.T)  # [F, Q]
        scores = torch.stack(per_layer)  # [L, F, Q]
        best, which = scores.max(-1)  # [L, F]
        flat = best.flatten()
        k = min(limit, flat.numel())
        top = torch.topk(flat, k)
        F = best.shape[1]
        hits = []
        for value, pos in zip(top.values.tolist(), top.indices.tolist()):
            layer, idx = divmod(int(pos), F)
            tok = int(q_ids[which[layer, idx]])
            proj = arch.project(arch.value_matrix(layer)[idx:idx + 1]).float()[0]  # [V]
            rank = int((proj > proj[tok]).sum())
            hits.append(ValueHit(
                layer=layer, index=idx, token_id=tok, token=names[tok], rank=rank, score=float(value),
                top_tokens=tuple(lm.tokenizer.decode([int(t)]) for t in torch.topk(proj, 8).indices.tolist()),
            ))
    return SearchResult(query, tokens, tuple(hits), int(flat.numel()), arch.num_layers, arch.num_layers,
                        ranking="projection")
