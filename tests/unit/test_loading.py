"""Loading errors that need no model weights."""

from __future__ import annotations

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import model as model_lib


def _write_gguf(path, arch: str):
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_that_is_not_a_causal_lm_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "encoder.gguf"
    _write_gguf(path, "bert")
    with pytest.raises(ss.SalienceError, match=r"not.*causal language model|Could not load .* as a causal"):
        ss.load_model(str(path))
    assert not any((tmp_path / "cache").rglob("config.json"))


def test_file_that_is_not_gguf_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"this is not a gguf file at all")
    with pytest.raises(ss.SalienceError, match="Could not load"):
        ss.load_model(str(path))


def test_missing_gguf_and_bad_options_are_clear_errors(tmp_path):
    with pytest.raises(ss.SalienceError, match="GGUF file not found"):
        ss.load_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ss.SalienceError, match="Unknown dtype"):
        ss.load_model("default", dtype="float8")
    with pytest.raises(ss.SalienceError, match="Unknown backward"):
        from sequence_salience.methods.gradients import resolve_backward
        import torch

        resolve_backward("magic", torch.device("cpu"))


def test_cuda_request_without_cuda_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is present on this machine; the error path cannot occur")
    with pytest.raises(ss.SalienceError, match="CUDA is not available"):
        ss.load_model("default", device="cuda")


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SEQUENCE_SALIENCE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert model_lib.cache_dir() == tmp_path / "sequence_salience"
    monkeypatch.setenv("SEQUENCE_SALIENCE_CACHE", str(tmp_path / "x"))
    assert model_lib.cache_dir() == tmp_path / "x"
