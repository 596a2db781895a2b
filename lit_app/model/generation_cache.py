"""Greedy generations kept on disk, so a restarted server shows them at once.

One JSON file per generation under `<cache dir>/generations/<model key>/`, named by
a hash of (model identity, prompt text, chat-template flag, generation settings).
Writes are atomic (temporary file + rename); unreadable files are ignored and
rewritten. The core library's cache dir is `sequence_salience.model.cache_dir()`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pathlib

import sequence_salience as ss
from sequence_salience.files import atomic_write_text
from sequence_salience.model import cache_dir

logger = logging.getLogger(__name__)

_FORMAT = 1
# Files kept per model; beyond it the least recently written are removed.
MAX_FILES = 5000


def model_identity(lm: ss.LanguageModel) -> str:
    """A string that changes when the weights, dtype or device kind change."""
    model = getattr(lm, "model", None)
    config = getattr(model, "config", None)
    source = getattr(config, "_name_or_path", "") or ""
    if source and os.path.exists(source):
        stat = os.stat(source)
        source = f"{os.path.abspath(source)}@{stat.st_mtime_ns}"
    device = getattr(getattr(lm, "device", None), "type", "cpu")
    return f"{getattr(lm, 'name', 'model')}|{source}|{getattr(lm, 'dtype', '')}|{device}"


class GenerationStore:
    """Disk store of `sequence_salience.Generation`s for one loaded model."""

    def __init__(self, lm: ss.LanguageModel, root: str | os.PathLike | None = None, max_files: int = MAX_FILES):
        identity = model_identity(lm)
        self.identity = identity
        key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.dir = pathlib.Path(root) if root is not None else cache_dir() / "generations" / key
        self.max_files = max_files
        self._puts = 0

    def _path(self, prompt_text: str, templated: bool, config: ss.GenerationConfig) -> pathlib.Path:
        settings = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else repr(config)
        blob = json.dumps([_FORMAT, self.identity, prompt_text, bool(templated), settings], sort_keys=True)
        return self.dir / f"{hashlib.sha256(blob.encode()).hexdigest()}.json"

    def get(self, prompt_text: str, templated: bool, config: ss.GenerationConfig) -> ss.Generation | None:
        path = self._path(prompt_text, templated, config)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return ss.Generation(
                text=data["text"],
                ids=tuple(int(i) for i in data["ids"]),
                offsets=tuple((int(s), int(e)) for s, e in data["offsets"]),
                stopped_by=str(data["stopped_by"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("Ignoring unreadable cached generation %s (%s).", path, e)
            return None

    def put(self, prompt_text: str, templated: bool, config: ss.GenerationConfig, gen: ss.Generation) -> None:
        path = self._path(prompt_text, templated, config)
        data = {"text": gen.text, "ids": list(gen.ids), "offsets": [list(o) for o in gen.offsets],
                "stopped_by": gen.stopped_by}
        try:
            atomic_write_text(path, json.dumps(data))
            self._puts += 1
            if self._puts % 100 == 1:
                self.prune()
        except OSError as e:  # a read-only cache must not break generation
            logger.warning("Could not cache the generation in %s (%s).", path.parent, e)

    def prune(self) -> int:
        """Removes the oldest files beyond `max_files`; returns how many were removed."""
        try:
            files = sorted(self.dir.glob("*.json"), key=lambda f: f.stat().st_mtime)
        except OSError:
            return 0
        extra = files[: max(0, len(files) - self.max_files)]
        for f in extra:
            try:
                f.unlink()
            except OSError:
                pass
        return len(extra)
