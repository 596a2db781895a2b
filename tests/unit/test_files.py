"""Atomic writes (sequence_salience/files.py): content in place, no temporary left on error,
readers never see a partial file."""

from __future__ import annotations

import os
import threading

import pytest

from sequence_salience import files


def _entries(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_writes_bytes_and_text_and_replaces_the_old_file(tmp_path):
    path = tmp_path / "sub" / "a.json"
    files.atomic_write_bytes(path, b"\x00\x01 first")
    assert path.read_bytes() == b"\x00\x01 first"
    files.atomic_write_text(path, "second · é")
    assert path.read_text(encoding="utf-8") == "second · é"
    assert _entries(path.parent) == ["a.json"]  # the temporary file is gone


def test_new_files_get_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        files.atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0o600


@pytest.mark.parametrize("fail", ["write", "rename"])
def test_no_temporary_file_is_left_on_error_and_the_old_file_stays(tmp_path, monkeypatch, fail):
    path = tmp_path / "a.txt"
    path.write_text("old")
    if fail == "write":
        with pytest.raises(TypeError):
            files.atomic_write_bytes(path, "not bytes")  # type: ignore[arg-type]
    else:
        def no_replace(src, dst):
            raise OSError("disk full")

        monkeypatch.setattr(os, "replace", no_replace)
        with pytest.raises(OSError, match="disk full"):
            files.atomic_write_text(path, "new")
    assert _entries(tmp_path) == ["a.txt"]
    assert path.read_text() == "old"


def test_concurrent_readers_see_a_whole_old_or_a_whole_new_file(tmp_path):
    """A writer alternates two 1 MiB contents; a reader checks every read is one of them, whole."""
    path = tmp_path / "big.bin"
    versions = (b"a" * (1 << 20), b"b" * (1 << 20))
    files.atomic_write_bytes(path, versions[0])
    done = threading.Event()
    seen: list[bytes] = []

    def write() -> None:
        for k in range(60):
            files.atomic_write_bytes(path, versions[k % 2])
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    while not done.is_set() or reads < 10:
        data = path.read_bytes()
        reads += 1
        if data not in versions:
            seen.append(data[:16] + b"... %d bytes" % len(data))
    writer.join()
    assert not seen, seen[:3]
    assert _entries(tmp_path) == ["big.bin"]


def test_copy_keeps_the_modification_time(tmp_path):
    src = tmp_path / "src.js"
    src.write_text("bundle")
    os.utime(src, (1_000_000_000, 1_000_000_000))
    dst = tmp_path / "out" / "dst.js"
    files.atomic_copy(src, dst)
    assert dst.read_text() == "bundle" and int(dst.stat().st_mtime) == 1_000_000_000
    assert _entries(dst.parent) == ["dst.js"]


def test_folder_is_renamed_into_place_or_not_at_all(tmp_path):
    target = tmp_path / "cache" / "model"
    with pytest.raises(RuntimeError):
        with files.atomic_dir(target) as tmp:
            (tmp / "config.json").write_text("{}")
            raise RuntimeError("conversion failed")
    assert _entries(target.parent) == []  # neither the target nor the temporary folder
    with files.atomic_dir(target) as tmp:
        (tmp / "config.json").write_text("{}")
    assert (target / "config.json").read_text() == "{}"
    assert _entries(target.parent) == ["model"]


def test_a_concurrent_writer_that_won_is_kept(tmp_path):
    target = tmp_path / "model"
    with files.atomic_dir(target, complete=lambda t: (t / "config.json").exists()) as tmp:
        (tmp / "config.json").write_text("mine")
        target.mkdir()  # another process renamed its complete folder into place meanwhile
        (target / "config.json").write_text("theirs")
        (target / "weights").write_text("w")
    assert (target / "config.json").read_text() == "theirs"
    assert _entries(tmp_path) == ["model"]
    with pytest.raises(OSError):  # an incomplete folder in the way is not taken for a winner
        with files.atomic_dir(target, complete=lambda t: (t / "missing").exists()) as tmp:
            (tmp / "config.json").write_text("mine")
