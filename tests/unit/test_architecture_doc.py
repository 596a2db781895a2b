"""docs/architecture.md checked against the sources (issue 44 §4: every count and edge generated or checked).

- Its room tables (core, LIT, frontend) name only files and folders that exist, and every source file of the
  three trees is in one row (named, or inside a folder a row names).
- The core's "Imports run upwards in this list": no file imports a file of a later row (the graphs are
  tests/unit/test_import_graph.py's, built from the sources); the LIT table's rows name each folder's files and its
  "may import" column is the folder rule that test enforces (`LIT_APP_MAY_IMPORT`).
- The frontend's stated order of folders ("Order of imports: ... -> ... ") is the order the TypeScript graph shows.
- The figures it quotes from data: the registry entry shown is the published one; the held-out prompt counts are
  those of `held_out_agreement.json`; "the N slowest tests" is the Makefile's `--durations=N`.
- It stays a map: at most 300 lines.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.unit.test_import_graph import (
    LIT_APP, LIT_APP_BASE, LIT_APP_ENTRY_POINTS, LIT_APP_MAY_IMPORT, ROOT, python_graph, ts_graph)

DOC_PATH = ROOT / "docs" / "architecture.md"
MAX_LINES = 300
# section heading -> (tree root, source suffix)
ROOM_SECTIONS = {
    "## Core rooms": ("sequence_salience", ".py"),
    "## LIT rooms": ("lit_app", ".py"),
    "## Frontend rooms": ("frontend/src", ".ts"),
}
_BACKTICKED = re.compile(r"`([^`]+)`")
_PATHLIKE = re.compile(r"^[\w./-]+(?:\.py|\.ts|\.json|\.npz|/)$")


def doc_text() -> str:
    return DOC_PATH.read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The text under the heading starting with `heading` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    found = re.search(rf"^{re.escape(heading)}(?:[ (][^\n]*)?\n", text, re.MULTILINE)
    assert found, f"docs/architecture.md has no section {heading!r}"
    rest = text[found.end():]
    end = re.search(rf"^#{{1,{len(level)}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def table_rows(block: str) -> list[str]:
    """The first cells of the markdown table rows in `block` (header and rule lines left out)."""
    cells = []
    for line in block.splitlines():
        if not line.startswith("|") or re.match(r"^\|[-| ]+\|$", line):
            continue
        first = line.split("|")[1].strip()
        if first in ("room", "folder / file", "folder", "file"):
            continue
        cells.append(first)
    return cells


def resolve(tree: str, name: str, previous: str | None) -> str | None:
    """A name of a row as a repository path: under the tree's root, from the repository root, or beside the
    name before it in the same cell (`shared/colormap.ts`, `pieces.ts`)."""
    candidates = [f"{tree}/{name}", name]
    if previous is not None and "/" in previous.rstrip("/"):
        candidates.append(previous.rstrip("/").rsplit("/", 1)[0] + "/" + name)
    for candidate in candidates:
        path = ROOT / candidate
        if (name.endswith("/") and path.is_dir()) or (not name.endswith("/") and path.is_file()):
            return candidate
    return None


def rows_of(heading: str) -> list[list[str]]:
    """Each room row of a section as the repository paths it names (folders end with '/')."""
    tree, _ = ROOM_SECTIONS[heading]
    rows = []
    for cell in table_rows(section(doc_text(), heading)):
        names = [n for n in _BACKTICKED.findall(cell) if _PATHLIKE.match(n)]
        paths: list[str] = []
        previous = None
        for name in names:
            path = resolve(tree, name, previous)
            assert path is not None, (
                f"docs/architecture.md {heading!r} names `{name}` (row {cell!r}), which is not a file or folder "
                f"under {tree}/: rename or remove it in the doc.")
            paths.append(path)
            previous = path
        rows.append(paths)
    return rows


def row_index(rows: list[list[str]], source: str) -> int | None:
    """The row holding `source`: the row naming it, else the row naming its closest folder."""
    best: tuple[int, int] | None = None  # (specificity, row)
    for i, paths in enumerate(rows):
        for path in paths:
            if path == source:
                return i
            if path.endswith("/") and source.startswith(path):
                if best is None or len(path) > best[0]:
                    best = (len(path), i)
    return None if best is None else best[1]


def tree_files(tree: str, suffix: str) -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / tree).rglob(f"*{suffix}")
                  if "__pycache__" not in p.parts and p.name != "__init__.py")


def test_the_doc_is_a_map_of_at_most_300_lines():
    n = len(doc_text().splitlines())
    assert n <= MAX_LINES, f"docs/architecture.md has {n} lines (at most {MAX_LINES}): move detail into docstrings."


@pytest.mark.parametrize("heading", list(ROOM_SECTIONS))
def test_every_source_file_is_in_one_room_row(heading):
    tree, suffix = ROOM_SECTIONS[heading]
    rows = rows_of(heading)
    missing = [f for f in tree_files(tree, suffix) if row_index(rows, f) is None]
    assert not missing, f"docs/architecture.md {heading!r} has no row for: {missing}"


@pytest.mark.parametrize("heading", ["## Core rooms"])
def test_imports_run_upwards_in_the_stated_order(heading):
    block = section(doc_text(), heading)
    assert "Imports run upwards in this list" in block, f"{heading!r} no longer states its order"
    tree, suffix = ROOM_SECTIONS[heading]
    rows = rows_of(heading)
    graph = python_graph()
    wrong = []
    for source in tree_files(tree, suffix):
        here = row_index(rows, source)
        for target in graph.get(source, ()):
            if not target.startswith(tree + "/") or target.endswith("__init__.py"):
                continue
            there = row_index(rows, target)
            if there is not None and here is not None and there > here:
                wrong.append(f"{source} (row {here + 1}) imports {target} (row {there + 1})")
    assert not wrong, f"docs/architecture.md {heading!r} says imports run upwards, but: {sorted(wrong)}"


def test_the_lit_table_names_every_file_in_its_folders_row_with_the_folders_rule():
    """Each lit_app folder's row names all its files and says what it may import: LIT_APP_MAY_IMPORT, the rule
    tests/unit/test_import_graph.py enforces; the rows of files name the base and the entry points."""
    rows = [line.strip("|").split(" | ") for line in section(doc_text(), "## LIT rooms").splitlines()
            if line.startswith("| `")]
    table = {room.strip(): (may.strip(), holds.strip()) for room, may, holds in rows}
    for folder, allowed in LIT_APP_MAY_IMPORT.items():
        may, holds = table[f"`{folder}/`"]
        assert may == (", ".join(allowed) or "the base"), f"docs/architecture.md: {folder}/ may import {allowed}"
        files = sorted(p.stem for p in (ROOT / LIT_APP / folder).glob("*.py") if p.stem != "__init__")
        unnamed = [f for f in files if not re.search(rf"`{f}(\.py)?`", holds)]
        assert not unnamed, f"docs/architecture.md's {folder}/ row does not name {unnamed}"
    roots = [cell for cell in table if not cell.endswith("/`")]
    named = {p for cell in roots for p in re.findall(r"`(\w+\.py)`", cell)}
    assert named == {p.rsplit("/", 1)[1] for p in (*LIT_APP_BASE, *LIT_APP_ENTRY_POINTS)} - {"__init__.py"}


def test_the_frontend_order_of_folders_is_the_graphs():
    block = section(doc_text(), "## Frontend rooms")
    match = re.search(r"Order of imports:(.*?)\.\s", block, re.DOTALL)
    assert match, "the frontend section no longer states its order of imports"
    chain = [_BACKTICKED.findall(step) for step in match.group(1).split("->")]
    chain = [names for names in chain if names]
    tree = "frontend/src"
    levels: dict[str, int] = {}
    for level, names in enumerate(chain):
        for name in names:
            path = resolve(tree, name, None)
            assert path is not None, f"the frontend order names `{name}`, which is not under {tree}/"
            levels[path] = level

    def level_of(source: str) -> int | None:
        hits = [(len(p), lv) for p, lv in levels.items() if p == source or (p.endswith("/") and source.startswith(p))]
        return max(hits)[1] if hits else None

    wrong = []
    for source, targets in ts_graph().items():
        here = level_of(source)
        for target in targets:
            there = level_of(target)
            if here is not None and there is not None and there < here:
                wrong.append(f"{source} imports {target}")
    assert not wrong, f"the frontend's stated order of imports is not the graph's: {sorted(wrong)}"


def test_the_registry_entry_shown_is_the_published_one():
    from lit_app.schema.method_registry import published_registry

    block = section(doc_text(), "## Method registry (published to the browser)")
    shown = json.loads(re.search(r"```json\n(.*?)```", block, re.DOTALL).group(1))
    published = {entry["name"]: entry for entry in published_registry()}
    assert shown == published[shown["name"]], "docs/architecture.md's registry entry differs from the published one"


def test_the_held_out_counts_quoted_are_the_files():
    data = json.loads((ROOT / "sequence_salience/attention/held_out_agreement.json").read_text())
    text = re.sub(r"\s+", " ", doc_text())
    for granularity, methods in data["granularities"].items():
        counts = {m["n"] for m in methods.values()}
        assert len(counts) == 1, f"held_out_agreement.json: the methods' counts differ at {granularity}"
        quoted = re.search(rf"{granularity} (\d+) prompts|{granularity} (\d+)\b", text)
        if quoted:
            assert int(next(g for g in quoted.groups() if g)) == counts.pop(), (
                f"docs/architecture.md quotes a held-out count at {granularity} that held_out_agreement.json "
                "does not hold")


def test_the_slowest_tests_count_is_the_makefiles():
    makefile = (ROOT / "Makefile").read_text()
    durations = int(re.search(r"--durations=(\d+)", makefile).group(1))
    quoted = re.search(r"the (\d+) slowest tests", re.sub(r"\s+", " ", doc_text()))
    assert quoted and int(quoted.group(1)) == durations
