"""Prompt datasets for the LIT app: the shipped case studies and user JSONL files.

A JSONL row is one JSON object per line:

    {"prompt": "...", "system": "...", "target": "...", "case": "..."}

`prompt` is required and non-empty; `system`, `target` and `case` are optional
strings (empty `target` means "generate greedily, then explain the output").
Blank lines are skipped. Any other problem stops loading with a `DatasetError`
that names the file and the line.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

from lit_nlp.api import dataset as lit_dataset
from lit_nlp.api import types as lit_types

from lit_app import fields

logger = logging.getLogger(__name__)

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CASE_STUDIES_PATH = os.path.join(DATA_DIR, "case_studies.jsonl")
CASE_STUDIES_NAME = "case_studies"

_OPTIONAL_FIELDS = (fields.SYSTEM, fields.TARGET, fields.CASE)
_KNOWN_FIELDS = (fields.PROMPT, *_OPTIONAL_FIELDS)


class DatasetError(ValueError):
    """A prompt file cannot be read; the message names the file, line and fix."""


def parse_jsonl(lines, source: str = "<string>") -> list[dict[str, str]]:
    """Parses prompt rows from an iterable of JSONL lines.

    Args:
      lines: iterable of str, one JSON object per line (blank lines skipped).
      source: file name used in error messages.

    Returns:
      Rows with exactly the keys of `fields.DATASET_SPEC`, missing optional
      fields filled with "".

    Raises:
      DatasetError: on the first malformed line, naming `source:line`.
    """
    rows: list[dict[str, str]] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}, line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(
                f"{where}: not valid JSON ({e.msg} at column {e.colno}); each line"
                ' must be one JSON object such as {"prompt": "..."}.'
            ) from None
        if not isinstance(obj, dict):
            raise DatasetError(
                f"{where}: expected a JSON object, got {type(obj).__name__};"
                ' write {"prompt": "..."}.'
            )
        prompt = obj.get(fields.PROMPT)
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(
                f'{where}: field "{fields.PROMPT}" is missing or empty; every row'
                " needs a non-empty prompt string."
            )
        row = {fields.CASE: "", fields.PROMPT: prompt}
        for key in _OPTIONAL_FIELDS:
            value = obj.get(key, "")
            if value is None:
                value = ""
            if not isinstance(value, str):
                raise DatasetError(
                    f'{where}: field "{key}" must be a string, got'
                    f" {type(value).__name__}."
                )
            row[key] = value
        unknown = sorted(set(obj) - set(_KNOWN_FIELDS))
        if unknown:
            logger.warning(
                "%s: ignoring unknown field(s) %s; known fields are %s.",
                where, ", ".join(unknown), ", ".join(_KNOWN_FIELDS),
            )
        rows.append(row)
    return rows


def load_jsonl(path: str) -> list[dict[str, str]]:
    """Reads prompt rows from a JSONL file (see `parse_jsonl`)."""
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: no such file; pass --data a .jsonl file of prompts.")
    with open(path, encoding="utf-8") as f:
        try:
            rows = parse_jsonl(f, source=path)
        except UnicodeDecodeError as e:
            raise DatasetError(f"{path}: not UTF-8 text ({e.reason}).") from None
    if not rows:
        raise DatasetError(f"{path}: no prompts found; write one JSON object per line.")
    return rows


class PromptDataset(lit_dataset.Dataset):
    """Prompts (with optional system prompt, target and case name) from JSONL."""

    def __init__(self, path: str = CASE_STUDIES_PATH, description: str | None = None):
        self._path = path
        self._examples = load_jsonl(path)
        self._description = description or f"Prompts from {os.path.basename(path)}"

    @classmethod
    def init_spec(cls) -> lit_types.Spec:
        # Lets the UI's "Configure" dialog load another JSONL file.
        return {"path": lit_types.String(default="", required=True)}

    def load(self, path: str) -> lit_dataset.Dataset:
        return lit_dataset.Dataset(base=self, examples=load_jsonl(path))

    def spec(self) -> lit_types.Spec:
        return dict(fields.DATASET_SPEC)


def get_datasets(data_path: str | None = None) -> Mapping[str, lit_dataset.Dataset]:
    """The shipped case studies, plus the user's file when `data_path` is set.

    The user's file comes first so that LIT opens it by default.
    """
    datasets: dict[str, lit_dataset.Dataset] = {}
    if data_path:
        name = os.path.splitext(os.path.basename(data_path))[0] or "user_prompts"
        if name == CASE_STUDIES_NAME:
            name = "user_" + name
        datasets[name] = PromptDataset(data_path)
        logger.info("Loaded %d prompts from %s as dataset '%s'.",
                    len(datasets[name]), data_path, name)
    datasets[CASE_STUDIES_NAME] = PromptDataset(
        CASE_STUDIES_PATH,
        description="Case studies of the Sequence Salience paper: few-shot"
        " classification, chain-of-thought arithmetic, constitutional principles.",
    )
    return datasets
