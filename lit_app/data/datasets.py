"""Prompt datasets for the LIT app: the shipped case studies and user JSONL files.

Two shipped files: `case_studies.jsonl`, one row per case (what the data table opens on), and
`case_study_variants.jsonl`, the same cases with other targets or prompts (a correctly labelled
few-shot prompt, a wrong chain-of-thought answer, a response that breaks a principle, ...).
The server loads both by default (LIT's dataset selector switches); `shipped_rows()` reads all.

A JSONL row is one JSON object per line:

    {"prompt": "...", "system": "...", "target": "...", "case": "...", "max_new_tokens": 192}

`prompt` is required and non-empty; `system`, `target` and `case` are optional
strings (empty `target` means "generate greedily, then explain the output");
`max_new_tokens` is the row's own response budget (1 to 1,024; the server's --max_new_tokens
caps it; absent: the default budget, lit_app/model/responses.py `Responses.config_for`), e.g. the
chain-of-thought case's, whose answer comes after its reasoning.
LIT's prompt-debugging rows ({"prompt", "target", "source"},
lit_nlp/examples/prompt_debugging/datasets.py) are read too: `source` becomes the
case name. A `.txt` file is one prompt per line (LIT's plain-text format).
Blank lines are skipped. Any other problem stops loading with a `DatasetError`
that names the file and the line.

`load_datasets` reads the server's `--datasets name:path,...` (or the one `--data`
file) and keeps at most `--max_examples` rows of each, as LIT's prompt-debugging
server does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

import lit_nlp
from lit_nlp.api import dataset as lit_dataset
from lit_nlp.api import types as lit_types

from sequence_salience.field_rules import MAX_NEW_TOKENS, FieldError
from lit_app.schema import fields
from lit_app.errors import RequestError
from lit_app.edge.request_body import json_text

logger = logging.getLogger(__name__)

DATA_DIR = os.path.dirname(os.path.abspath(__file__))  # lit_app/data/: this file and the shipped JSONL
CASE_STUDIES_PATH = os.path.join(DATA_DIR, "case_studies.jsonl")
CASE_STUDIES_NAME = "case_studies"
CASE_STUDIES_DESCRIPTION = ("Case studies of the Sequence Salience paper, one row per case: few-shot"
                            " classification with a mislabeled exemplar, chain-of-thought arithmetic,"
                            " constitutional principles, a simple question.")
VARIANTS_PATH = os.path.join(DATA_DIR, "case_study_variants.jsonl")
VARIANTS_NAME = "case_study_variants"
VARIANTS_DESCRIPTION = ("Variants of the case studies: other targets (right and wrong answers, a response"
                        " that breaks a principle) and other prompts for the same cases.")
# The shipped files in order: the case studies first, then their variants.
SHIPPED = ((CASE_STUDIES_NAME, CASE_STUDIES_PATH), (VARIANTS_NAME, VARIANTS_PATH))
_DESCRIPTIONS = {CASE_STUDIES_PATH: CASE_STUDIES_DESCRIPTION, VARIANTS_PATH: VARIANTS_DESCRIPTION}

_OPTIONAL_FIELDS = (fields.SYSTEM, fields.TARGET, fields.CASE)
# LIT's prompt-debugging JSONL names the case "source" (a CategoryLabel there too).
LIT_SOURCE = "source"
_KNOWN_FIELDS = (fields.PROMPT, *_OPTIONAL_FIELDS, fields.MAX_NEW_TOKENS, LIT_SOURCE)
# LIT's own sample prompts (its prompt-debugging server's default dataset).
LIT_SAMPLE_NAME = "sample_prompts"
LIT_SAMPLE_PATH = os.path.join(os.path.dirname(os.path.abspath(lit_nlp.__file__)), "examples",
                               "prompt_debugging", "prompt_examples.jsonl")
# Names --datasets takes without a path.
BUILTIN_PATHS = {**dict(SHIPPED), LIT_SAMPLE_NAME: LIT_SAMPLE_PATH}
FORMATS = (".jsonl", ".txt")


class DatasetError(RequestError):
    """A prompt file cannot be read; the message names the file, line and fix.

    A `RequestError`: during a request the file is one the client named (/create_dataset,
    /load_datapoints), so the middleware answers 400, not LIT's 500."""


def parse_jsonl(lines, source: str = "<string>") -> list[dict[str, str | int]]:
    """Parses prompt rows from an iterable of JSONL lines.

    Args:
      lines: iterable of str, one JSON object per line (blank lines skipped).
      source: file name used in error messages.

    Returns:
      Rows with the keys of `fields.DATASET_SPEC`, missing optional fields filled
      with "", plus `max_new_tokens` (an int) on rows that set it.

    Raises:
      DatasetError: on the first malformed line, naming `source:line`.
    """
    rows: list[dict[str, str | int]] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}, line {lineno}"
        obj = json_text(line, lambda e: DatasetError(
            f"{where}: not valid JSON ({e.msg} at column {e.colno}); each line"
            ' must be one JSON object such as {"prompt": "..."}.'))
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
        budget = obj.get(fields.MAX_NEW_TOKENS)
        if budget is not None:
            if not isinstance(budget, int) or isinstance(budget, bool):
                raise DatasetError(f'{where}: field "{fields.MAX_NEW_TOKENS}" must be a whole number, got {budget!r}.')
            try:
                row[fields.MAX_NEW_TOKENS] = int(MAX_NEW_TOKENS.parse(budget))
            except FieldError as e:
                raise DatasetError(f'{where}: field "{fields.MAX_NEW_TOKENS}" is {e}.') from None
        lit_source = obj.get(LIT_SOURCE)
        if lit_source is not None and not row[fields.CASE]:
            if not isinstance(lit_source, str):
                raise DatasetError(f'{where}: field "{LIT_SOURCE}" must be a string, got {type(lit_source).__name__}.')
            row[fields.CASE] = lit_source
        unknown = sorted(set(obj) - set(_KNOWN_FIELDS))
        if unknown:
            logger.warning(
                "%s: ignoring unknown field(s) %s; known fields are %s.",
                where, ", ".join(unknown), ", ".join(_KNOWN_FIELDS),
            )
        rows.append(row)
    return rows


def parse_text(lines) -> list[dict[str, str | int]]:
    """Prompt rows of a plain-text file: one prompt per non-blank line (LIT's PlaintextSents)."""
    return [{fields.CASE: "", fields.PROMPT: line.strip(), fields.SYSTEM: "", fields.TARGET: ""}
            for line in lines if line.strip()]


def load_jsonl(path: str) -> list[dict[str, str | int]]:
    """Reads prompt rows from a JSONL file (see `parse_jsonl`), or a .txt file (`parse_text`)."""
    if not isinstance(path, str):  # an int would be taken as an open file descriptor of this process
        raise DatasetError(f"The path must be a string naming a .jsonl (or .txt) file, got {type(path).__name__}.")
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: no such file; pass a .jsonl (or .txt) file of prompts.")
    text = path.endswith(".txt")
    with open(path, encoding="utf-8") as f:
        try:
            rows = parse_text(f) if text else parse_jsonl(f, source=path)
        except UnicodeDecodeError as e:
            raise DatasetError(f"{path}: not UTF-8 text ({e.reason}).") from None
    if not rows:
        raise DatasetError(f"{path}: no prompts found; write one {'prompt' if text else 'JSON object'} per line.")
    return rows


def shipped_rows() -> list[dict[str, str | int]]:
    """Every shipped row: the case studies (one per case), then their variants (`SHIPPED` order)."""
    return [row for _, path in SHIPPED for row in load_jsonl(path)]


class PromptDataset(lit_dataset.Dataset):
    """Prompts (with optional system prompt, target and case name) from JSONL."""

    def __init__(self, path: str = CASE_STUDIES_PATH, description: str | None = None,
                 max_examples: int | None = None):
        self._path = path
        self._examples = load_jsonl(path)[:max_examples]
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
    """The shipped datasets (case studies, variants), plus the user's file when `data_path` is set (first)."""
    return load_datasets([], data_path)


def load_datasets(
    specs: Sequence[tuple[str, str]] = (),
    data_path: str | None = None,
    max_examples: int | None = None,
) -> dict[str, lit_dataset.Dataset]:
    """The server's datasets: `--data` first (LIT opens the first), then `--datasets` in order.

    Args:
      specs: [(name, path)] from --datasets (.jsonl ours or LIT's, or .txt); empty: the case
        studies and their variants (`SHIPPED`; the default, as LIT's server defaults to its sample
        prompts).
      data_path: the --data file, named by its stem.
      max_examples: keep at most this many rows of each (LIT's --max_examples).

    Raises:
      DatasetError: a missing or malformed file or an unknown format, naming the file (and line).
    """
    out: dict[str, lit_dataset.Dataset] = {}
    wanted = list(specs) or list(SHIPPED)
    if data_path:
        name = os.path.splitext(os.path.basename(data_path))[0] or "user_prompts"
        if name in dict(wanted):
            name = "user_" + name
        wanted.insert(0, (name, data_path))
    for name, path in wanted:
        if not path.endswith(FORMATS):
            raise DatasetError(f"{path} (dataset {name!r}): unsupported format; use a .jsonl file (one JSON object"
                               " per line) or a .txt file (one prompt per line).")
        description = _DESCRIPTIONS.get(path, f"Prompts from {os.path.basename(path)}")
        out[name] = PromptDataset(path, description=description, max_examples=max_examples)
        logger.info("Loaded %d prompts from %s as dataset '%s'.", len(out[name]), path, name)
    return out
