"""Exact JSON save / load of a SalienceResult.

File layout (one JSON object, UTF-8):

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
the saved one: same dtypes, shapes and bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from sequence_salience.errors import SalienceError

FORMAT = "sequence_salience.SalienceResult"
VERSION = 1


def _dataclass_types() -> dict[str, type]:
    from sequence_salience.methods.base import SalienceConfig  # pylint: disable=import-outside-toplevel

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


def result_to_dict(result, meta: Mapping[str, Any] | None = None) -> dict:
    fields = {f.name: encode(getattr(result, f.name)) for f in dataclasses.fields(result)}
    return {"format": FORMAT, "version": VERSION, "meta": encode(dict(meta or {})), "result": fields}


def result_from_dict(obj: Mapping[str, Any], source: str = "<dict>"):
    from sequence_salience.salience import SalienceResult  # pylint: disable=import-outside-toplevel

    if not isinstance(obj, Mapping) or obj.get("format") != FORMAT:
        raise SalienceError(f"{source} is not a saved SalienceResult (no \"format\": {FORMAT!r}). "
                            "Fix: load a file written by result.to_json(path).")
    if obj.get("version") != VERSION:
        raise SalienceError(f"{source} has format version {obj.get('version')!r}; this library reads {VERSION}. "
                            "Fix: save it again with this version.")
    data = obj["result"]
    names = [f.name for f in dataclasses.fields(SalienceResult)]
    missing = [n for n in names if n not in data]
    if missing:
        raise SalienceError(f"{source} lacks the fields {missing}. Fix: save it again with result.to_json(path).")
    values = {n: decode(data[n]) for n in names}
    values["matrices"] = dict(values["matrices"])
    return SalienceResult(**values)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes text to path through a temporary file in the same folder, then renames it into place."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


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
