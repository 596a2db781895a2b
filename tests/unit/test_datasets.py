"""Prompt datasets: the shipped case studies and user JSONL files (no model needed)."""

import os
import json

import pytest

from lit_app.data import datasets
from lit_app.schema import fields


def test_shipped_case_studies_are_one_row_per_case_of_the_paper():
    ds = datasets.PromptDataset(datasets.CASE_STUDIES_PATH)
    cases = [ex[fields.CASE] for ex in ds.examples]
    # What the data table opens on: one row per case, the paper's three first, in its order.
    assert cases == ["few-shot classification (mislabeled exemplar)", "chain-of-thought arithmetic",
                     "constitutional principles", "simple question"]
    # The constitutional case puts its principles in a system prompt.
    assert any(ex[fields.SYSTEM] for ex in ds.examples if "constitution" in ex[fields.CASE])
    # Some rows explain a given target, some ask for the model's own response; the chain of thought
    # is the model's own (the example the benchmarks and the compare e2e test click).
    assert any(ex[fields.TARGET] for ex in ds.examples)
    cot = ds.examples[1]
    assert cot[fields.PROMPT].startswith("A train leaves at 2:15 pm") and cot[fields.TARGET] == ""


def test_variants_are_other_rows_of_the_same_cases_and_shipped_rows_reads_both():
    main = datasets.load_jsonl(datasets.CASE_STUDIES_PATH)
    variants = datasets.load_jsonl(datasets.VARIANTS_PATH)
    # Each variant belongs to a case of the first file ("few-shot classification (mislabeled
    # exemplar)" is of the few-shot family).
    families = {ex[fields.CASE].split(" (")[0] for ex in main}
    assert {v[fields.CASE] for v in variants} <= families
    rows = [(r[fields.CASE], r[fields.SYSTEM], r[fields.PROMPT], r[fields.TARGET]) for r in main + variants]
    assert len(set(rows)) == len(rows) == 11  # no row twice, none lost in the split
    # The chain of thought's right and wrong answers, given as targets, are variants.
    assert {v[fields.TARGET][-3:] for v in variants if "Tom has 3 boxes" in v[fields.PROMPT]} == {"26.", "24."}
    assert datasets.shipped_rows() == main + variants
    assert datasets.BUILTIN_PATHS[datasets.VARIANTS_NAME] == datasets.VARIANTS_PATH


def test_the_server_loads_both_shipped_datasets_by_default_with_their_descriptions():
    loaded = datasets.load_datasets()
    assert list(loaded) == [datasets.CASE_STUDIES_NAME, datasets.VARIANTS_NAME]
    assert "one row per case" in loaded[datasets.CASE_STUDIES_NAME].description()
    assert "Variants" in loaded[datasets.VARIANTS_NAME].description()
    assert [len(d) for d in loaded.values()] == [4, 7]


@pytest.mark.parametrize("path", [datasets.CASE_STUDIES_PATH, datasets.VARIANTS_PATH])
def test_rows_have_exactly_the_spec_fields(path):
    """...and a row's own response budget where it has one (not shown by LIT; tests/unit/test_row_budget.py)."""
    ds = datasets.PromptDataset(path)
    assert set(ds.spec()) == set(fields.DATASET_SPEC)
    for ex in ds.examples:
        assert set(ex) - {fields.MAX_NEW_TOKENS} == set(fields.DATASET_SPEC)
        assert ex[fields.PROMPT].strip()


def test_optional_fields_default_to_empty_and_blank_lines_are_skipped():
    rows = datasets.parse_jsonl(['{"prompt": "hi"}', "", "   ", '{"prompt": "yo", "target": "t"}'])
    assert rows == [
        {fields.PROMPT: "hi", fields.SYSTEM: "", fields.TARGET: "", fields.CASE: ""},
        {fields.PROMPT: "yo", fields.SYSTEM: "", fields.TARGET: "t", fields.CASE: ""},
    ]


@pytest.mark.parametrize(
    "bad_line, expected",
    [
        pytest.param('{"prompt": "x"', "not valid JSON", id="broken-json"),
        pytest.param('["prompt"]', "expected a JSON object", id="not-an-object"),
        pytest.param('{"target": "x"}', '"prompt" is missing or empty', id="no-prompt"),
        pytest.param('{"prompt": "   "}', '"prompt" is missing or empty', id="blank-prompt"),
        pytest.param('{"prompt": "x", "system": 3}', '"system" must be a string', id="system-not-str"),
    ],
)
def test_malformed_line_error_names_file_and_line(tmp_path, bad_line, expected):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "fine"}\n\n' + bad_line + "\n", encoding="utf-8")
    with pytest.raises(datasets.DatasetError) as info:
        datasets.load_jsonl(str(path))
    message = str(info.value)
    assert f"{path}, line 3" in message
    assert expected in message


def test_missing_and_empty_files_are_clear_errors(tmp_path):
    with pytest.raises(datasets.DatasetError, match="no such file"):
        datasets.load_jsonl(str(tmp_path / "absent.jsonl"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(datasets.DatasetError, match="no prompts found"):
        datasets.load_jsonl(str(empty))


def test_unknown_fields_are_ignored_with_a_warning(caplog):
    rows = datasets.parse_jsonl(['{"prompt": "x", "label": "lit"}'], source="f.jsonl")
    assert rows[0][fields.PROMPT] == "x" and "label" not in rows[0]
    assert "f.jsonl, line 1" in caplog.text and "label" in caplog.text
    # LIT's prompt-debugging "source" is not unknown: it is the case name (unless "case" is given).
    assert datasets.parse_jsonl(['{"prompt": "x", "source": "lit"}'])[0][fields.CASE] == "lit"
    assert datasets.parse_jsonl(['{"prompt": "x", "source": "lit", "case": "ours"}'])[0][fields.CASE] == "ours"


def test_user_file_is_loaded_first_beside_the_case_studies(tmp_path):
    path = tmp_path / "my_prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Why is the sky blue?", "case": "mine"}) + "\n", encoding="utf-8")
    loaded = datasets.get_datasets(str(path))
    assert list(loaded) == ["my_prompts", datasets.CASE_STUDIES_NAME, datasets.VARIANTS_NAME]
    assert loaded["my_prompts"].examples[0][fields.PROMPT] == "Why is the sky blue?"


def test_load_returns_a_dataset_with_the_same_spec(tmp_path):
    path = tmp_path / "other.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n', encoding="utf-8")
    loaded = datasets.PromptDataset().load(str(path))
    assert [ex[fields.PROMPT] for ex in loaded.examples] == ["a", "b"]
    assert set(loaded.spec()) == set(fields.DATASET_SPEC)


def test_a_non_string_path_is_refused_and_never_read_as_a_file_descriptor(tmp_path):
    """os.path.isfile / open take an int as a file descriptor: load_jsonl(fd) read (and closed) an open
    file of the process, whatever its path."""
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_text('{"prompt": "secret"}\n', encoding="utf-8")
    fd = os.open(secret, os.O_RDONLY)
    try:
        for bad in (fd, [str(secret)], None):
            with pytest.raises(datasets.DatasetError, match="must be a string"):
                datasets.load_jsonl(bad)
        os.fstat(fd)  # still open
    finally:
        os.close(fd)
