"""Atomic file writes: the one place that writes a file (or folder) under a temporary name and
renames it into place, so a reader never sees a half-written file and a crash leaves none.

    atomic_write_bytes(path, data)       atomic_write_text(path, text)       atomic_write_json(path, obj)
    atomic_copy(src, dst)                with atomic_dir(folder) as tmp: ... (write into tmp)

The temporary file sits in the target's folder (os.replace is atomic only within one file
system), is flushed and fsynced before the rename, and is removed when anything fails. New
files get the usual permissions (0o666 less the umask), not tempfile.mkstemp's 0o600.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator

PathLike = str | os.PathLike


def _open_temp(path: str) -> tuple[int, str]:
    """A new, exclusive temporary file next to `path`: (descriptor, its path)."""
    folder, name = os.path.split(path)
    while True:
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue


def _remove_quietly(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Writes `data` to `path` atomically (creating its folder); on error no temporary file is left."""
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = _open_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    """Writes `text` to `path` atomically (see atomic_write_bytes)."""
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: PathLike, obj) -> str:
    """Writes `obj` as strict JSON (no NaN, UTF-8 text) to `path` atomically; returns the path."""
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, allow_nan=False))
    return os.fspath(path)


def atomic_copy(src: PathLike, dst: PathLike) -> None:
    """Copies `src` to `dst` atomically, keeping its modification time (shutil.copy2)."""
    dst = os.path.abspath(os.fspath(dst))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    fd, tmp = _open_temp(dst)
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        _remove_quietly(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(target: PathLike, complete: Callable[[pathlib.Path], bool] | None = None
               ) -> Iterator[pathlib.Path]:
    """A temporary folder next to `target`, renamed to `target` when the block ends without error.

    When another writer renamed its own folder into place first (the rename fails because
    `target` exists), that one is kept if `complete(target)` (default: it exists). The temporary
    folder is removed in every case.
    """
    target = pathlib.Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        try:
            os.replace(tmp, target)
        except OSError:
            if not (complete or pathlib.Path.exists)(target):  # not a concurrent writer that won
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
