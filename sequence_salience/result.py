"""SalienceResult: the salience of every token for every target token of one pair, and its JSON I/O.

The engine (salience.py) builds results; display/ renders them; the CLI and the LIT layer save,
load and merge them. This module imports neither the engine nor display: numpy, the method
registry (whether a method is linear) and files.py (atomic writes). Its show / to_html /
_repr_html_ conveniences hand the result to the registered `Renderer`: display/ registers itself
when it is imported (the package's __init__ imports it), so display depends on results and never
the other way round.

JSON file layout (one JSON object, UTF-8):

    {"format": "sequence_salience.SalienceResult", "version": 1,
     "meta": {...},                       # free-form, e.g. the model name and the CLI row
     "result": {"text": "...", "prompt_end": 123, "tokens": [...], "role_spans": [[0, 12, "markup"]],
                "matrices": {"grad_norm": {"__ndarray__": {"dtype": "float32", "shape": [T, N],
                                                          "data": "<base64 of little-endian bytes>"}}},
                "config": {"__dataclass__": "SalienceConfig", "ig_steps": 16, ...}, ...}}

Every dataclass field of SalienceResult is written, so fields added later are
kept too. Arrays are stored as base64 of their raw bytes (exact, compact, and
NaN-safe); plain values (strings, ints, floats, bools, None) as JSON values;
tuples as JSON lists (read back as tuples); mappings with non-string keys
(e.g. `spans`, keyed by (t0, t1)) as {"__mapping__": [[key, value], ...]}. `load` returns a result equal to
the saved one: same dtypes, shapes and bytes. Files saved before the methods declared their extras hold
"grad_gram" and "ig_completeness_error" as fields of "result"; `load` reads them into `extras`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from sequence_salience.errors import SalienceError
from sequence_salience.files import atomic_write_text
from sequence_salience.methods import get_method, list_methods
from sequence_salience.methods.base import SalienceConfig

Span = tuple[int, int]



class Renderer(Protocol):
    """What SalienceResult's display conveniences call; sequence_salience.display provides it."""

    def repr_html(self, result: SalienceResult) -> str: ...

    def show(self, result: SalienceResult, method, granularity, target, **options) -> None: ...

    def to_html(self, result: SalienceResult, path, method, granularity, target, **options) -> str: ...


_RENDERER: list[Renderer] = []  # at most one: the last registered


def register_renderer(r: Renderer) -> None:
    """Makes `r` the renderer of result.show / to_html / _repr_html_ (display/ calls this on import)."""
    _RENDERER[:] = [r]


def renderer() -> Renderer:
    if not _RENDERER:
        raise SalienceError("No renderer is registered for SalienceResult.show / to_html. "
                            "Fix: `import sequence_salience` (it imports sequence_salience.display, which registers).")
    return _RENDERER[0]

@dataclasses.dataclass
class UneditedForward:
    """What a first highlight's gradient pass over the unedited prompt + target leaves for a segment method of the
    same span (compute_span_result(record=span_recorder)), so that it runs no forward of the unedited prompt of its own: every
    layer's keys and values <[1, Hkv, N, Dh]> (the prefix its ablations reuse: ablation/prefix.py) and the attention
    recorder of the span's rows (attention/features.py AttentionRecorder; None for a family it does not read).
    Taken once (`take`): the keys and values go with the first segment computation that uses them."""

    span: tuple[int, int]
    layers: list | None
    recorder: object | None = None

    def take(self) -> tuple[list | None, object | None]:
        """(layers, recorder), then None for both from here on."""
        out = (self.layers, self.recorder)
        self.layers = self.recorder = None
        return out


@dataclasses.dataclass(frozen=True)
class SalienceResult:
    """Salience of every token for every target token of one (prompt, target) pair.

    Attributes:
      text: prompt + target as one string; `offsets` index into it.
      prompt_end: character index where the target starts.
      ids: <int64>[N] token ids (prompt then target).
      tokens: N display strings.
      offsets: <int64>[N, 2] character spans; special tokens added by the tokenizer are empty.
      special: <bool>[N].
      n_prompt_tokens: P; target token t sits at position P + t.
      target_logprobs: <float32>[T] log p(target_t | prefix).
      matrices: method name -> <float32>[T, N]: salience of token i for log p(target_t);
        zero for i >= P + t (causality).
      role_spans: (start, end, role) of the prompt (chat template markup vs. content).
      config: the settings used.
      spans: (t0, t1) -> method -> <float32>[N]: salience of spans computed directly
        (compute_span_result); a result may hold spans and no matrices (a partial result).
      span_ig_errors: (t0, t1) -> IG completeness error of that span (for spans computed with IG).
      extras: named arrays the methods declare (SalienceMethod.result_extras), e.g. grad_norm's
        "grad_gram" <float32>[N, T, T] (exact grad_norm spans) and integrated gradients'
        "ig_completeness_error" <float32>[T]; absent when the method did not run (or, for the Gram
        tensor, when it was too large to keep).
      unedited: None, or what the gradient pass of compute_span_result(record=span_recorder) leaves for a segment method
        (UneditedForward); not compared, not saved.
    """

    text: str
    prompt_end: int
    ids: np.ndarray
    tokens: tuple[str, ...]
    offsets: np.ndarray
    special: np.ndarray
    n_prompt_tokens: int
    target_logprobs: np.ndarray
    matrices: Mapping[str, np.ndarray]
    role_spans: tuple[tuple[int, int, str], ...]
    config: SalienceConfig
    spans: Mapping[Span, Mapping[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    span_ig_errors: Mapping[Span, float] = dataclasses.field(default_factory=dict)
    extras: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    unedited: UneditedForward | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def num_targets(self) -> int:
        return len(self.ids) - self.n_prompt_tokens

    def has_span(self, method: str, t0: int = 0, t1: int | None = None) -> bool:
        """Whether span_salience(method, t0, t1) can answer without a model pass."""
        t1 = self.num_targets if t1 is None else t1
        if method in self.spans.get((t0, t1), {}):
            return True
        if method not in self.matrices:
            return False
        record = get_method(method)
        return record.linear or t1 - t0 == 1 or (record.span_gram is not None and record.span_gram in self.extras)

    def merged(self, other: "SalienceResult") -> "SalienceResult":
        """This result with `other`'s matrices and spans added (same prompt and target)."""
        if other.text != self.text or not np.array_equal(other.ids, self.ids):
            raise SalienceError("Cannot merge salience results of different texts. Fix: merge results of one pair.")
        spans = {k: dict(v) for k, v in self.spans.items()}
        for k, v in other.spans.items():
            spans.setdefault(k, {}).update(v)
        return dataclasses.replace(
            self,
            matrices={**self.matrices, **other.matrices},
            extras={**self.extras, **other.extras},
            spans=spans,
            span_ig_errors={**self.span_ig_errors, **other.span_ig_errors},
            config=other.config if other.matrices else self.config,
            unedited=other.unedited if other.unedited is not None else self.unedited,
        )

    def span_salience(self, method: str, t0: int = 0, t1: int | None = None) -> np.ndarray:
        """Exact salience for log p(target[t0:t1]) (the sum of its tokens' log-probs); no model pass.

        Returns: <float32>[N].
        """
        t1 = self.num_targets if t1 is None else t1
        if not 0 <= t0 < t1 <= self.num_targets:
            raise SalienceError(f"Target span {t0}:{t1} is outside 0:{self.num_targets}. Fix: pick target tokens in range.")
        direct = self.spans.get((t0, t1), {}).get(method)
        if direct is not None:
            return direct
        if method not in self.matrices:
            raise SalienceError(f"{method!r} was not computed here. Fix: pass it in methods=(...); have {list(self.matrices)}.")
        record = get_method(method)
        gram = self.extras.get(record.span_gram) if record.span_gram else None
        values = span_from_rows(self.matrices[method], gram, t0, t1, record.linear)
        if values is None:
            kept = record.span_gram or "per-token gradient vectors"
            raise SalienceError(
                f"This result is too large to keep what exact {method} spans need ({kept}). "
                "Fix: call compute_span_salience(...) for this span (one forward and backward)."
            )
        return values

    # Display: thin delegates to the registered Renderer (sequence_salience.display). Files: this
    # module's JSON I/O.

    def _repr_html_(self) -> str:
        return renderer().repr_html(self)

    def show(self, method: str | None = None, granularity: str = "word", target=None, **options) -> None:
        """Shows the coloured prompt and response: HTML in a notebook, rich text in a terminal."""
        renderer().show(self, method, granularity, target, **options)

    def to_html(self, path, method: str | None = None, granularity: str = "word", target=None, **options) -> str:
        """Writes one self-contained HTML file; returns the path."""
        return renderer().to_html(self, path, method, granularity, target, **options)

    def to_json(self, path, meta=None) -> str:
        """Saves this result exactly as JSON (SalienceResult.load reads it back); returns the path."""
        save_json(self, path, meta)
        return os.fspath(path)

    @classmethod
    def load(cls, path) -> "SalienceResult":
        """Reads a result written by to_json."""
        return load_json(path)


def span_from_rows(matrix: np.ndarray, gram: np.ndarray | None, t0: int, t1: int, linear: bool) -> np.ndarray | None:
    """The salience of target span [t0, t1) from per-token rows, or None where only a model pass can tell.

    The rule the browser follows too (frontend/src/salience/spans.ts; cases: tests/data/span_cases.json):
    a method linear in the target's log-prob (its registry record's `linear`) sums its rows, whatever its
    sign; a one-token span is its row, for any method; otherwise the norm of the summed gradient vectors,
    sqrt(sum_{j,k in span} G_i[j, k]), needs the Gram tensor.

    Args:
      matrix: <float32>[T, N] rows of one method.
      gram: <float32>[N, T, T] Gram of the per-target gradient vectors at each token, or None.

    Returns:
      <float32>[N], or None (a non-linear method, a span of several tokens and no Gram tensor).
    """
    if linear:
        return matrix[t0:t1].sum(0)
    if t1 - t0 == 1:
        return np.array(matrix[t0])
    if gram is None:
        return None
    block = gram[:, t0:t1, t0:t1]  # [N, S, S]
    return np.sqrt(np.clip(block.sum((1, 2)), 0.0, None)).astype(np.float32)


FORMAT = "sequence_salience.SalienceResult"
VERSION = 1


def _dataclass_types() -> dict[str, type]:
    return {"SalienceConfig": SalienceConfig}


def encode(value: Any) -> Any:
    """A JSON-ready form of value (see the module docstring)."""
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        if arr.dtype == object:
            raise SalienceError("Cannot save an object array to JSON. Fix: use numeric or bool arrays.")
        le = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        return {"__ndarray__": {"dtype": arr.dtype.str.lstrip("<>|="), "shape": list(arr.shape),
                                "data": base64.b64encode(le.tobytes()).decode("ascii")}}
    if isinstance(value, np.generic):
        return encode(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"__dataclass__": type(value).__name__}
        out.update({f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)})
        return out
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__mapping__": [[encode(k), encode(v)] for k, v in value.items()]}  # e.g. (t0, t1) keys
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    raise SalienceError(f"Cannot save a {type(value).__name__} to JSON.")


def decode(value: Any) -> Any:
    """Inverse of encode (lists come back as tuples)."""
    if isinstance(value, list):
        return tuple(decode(v) for v in value)
    if not isinstance(value, dict):
        return value
    if "__ndarray__" in value:
        spec = value["__ndarray__"]
        dtype = np.dtype(spec["dtype"]).newbyteorder("<")
        arr = np.frombuffer(base64.b64decode(spec["data"]), dtype=dtype).reshape(spec["shape"])
        return arr.astype(dtype.newbyteorder("="), copy=True)  # native order, writable
    if "__mapping__" in value:
        return {decode(k): decode(v) for k, v in value["__mapping__"]}
    if "__float__" in value:
        return float(value["__float__"])
    if "__dataclass__" in value:
        cls = _dataclass_types().get(value["__dataclass__"])
        if cls is None:
            raise SalienceError(f"Unknown dataclass {value['__dataclass__']!r} in the file.")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: decode(v) for k, v in value.items() if k in names})
    return {k: decode(v) for k, v in value.items()}


# Fields a saved result does not hold: what a first highlight's pass leaves for a segment method in this process
# (its keys and values), never written to a file or a cache.
NOT_SAVED = ("unedited",)


def _saved_fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in NOT_SAVED]


def result_to_dict(result, meta: Mapping[str, Any] | None = None) -> dict:
    fields = {name: encode(getattr(result, name)) for name in _saved_fields(result)}
    return {"format": FORMAT, "version": VERSION, "meta": encode(dict(meta or {})), "result": fields}


def result_from_dict(obj: Mapping[str, Any], source: str = "<dict>") -> SalienceResult:
    if not isinstance(obj, Mapping) or obj.get("format") != FORMAT:
        raise SalienceError(f"{source} is not a saved SalienceResult (no \"format\": {FORMAT!r}). "
                            "Fix: load a file written by result.to_json(path).")
    if obj.get("version") != VERSION:
        raise SalienceError(f"{source} has format version {obj.get('version')!r}; this library reads {VERSION}. "
                            "Fix: save it again with this version.")
    data = dict(obj["result"])
    if "extras" not in data:  # saved when the methods' extras were fields of the result
        data["extras"] = {n: data[n] for n in _declared_extras() if data.get(n) is not None}
    names = _saved_fields(SalienceResult)
    missing = [n for n in names if n not in data]
    if missing:
        raise SalienceError(f"{source} lacks the fields {missing}. Fix: save it again with result.to_json(path).")
    values = {n: decode(data[n]) for n in names}
    values["matrices"] = dict(values["matrices"])
    return SalienceResult(**values)


def _declared_extras() -> list[str]:
    """The names of every result extra the registry's methods declare."""
    return [e.name for m in list_methods() for e in get_method(m).result_extras]


def save_json(result, path: str | os.PathLike, meta: Mapping[str, Any] | None = None) -> None:
    """Writes result (and optional metadata) to path as JSON, atomically."""
    atomic_write_text(path, json.dumps(result_to_dict(result, meta), ensure_ascii=False, allow_nan=False))


def load_json(path: str | os.PathLike, with_meta: bool = False):
    """Reads a file written by save_json / result.to_json.

    Returns: the SalienceResult, or (result, meta) with with_meta=True.

    Raises:
      SalienceError: missing file, not JSON, or not a saved result.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise SalienceError(f"{path} does not exist. Fix: check the path.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SalienceError(f"{path} is not valid JSON ({e}). Fix: load a file written by result.to_json(path).") from None
    result = result_from_dict(obj, path)
    if with_meta:
        return result, dict(decode(obj.get("meta") or {}))
    return result
