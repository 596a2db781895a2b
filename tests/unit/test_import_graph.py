"""No import circle, between files or between folders, in sequence_salience/, lit_app/ and frontend/src/.

The graphs are built from the sources (Python: every import statement found by `ast`, at module
level, inside functions and under TYPE_CHECKING alike; TypeScript: every `import` / `export ... from`
/ `import(...)` of a relative path, `import type` included), so a call-time or type-only import
counts as much as a module-level one. An import names one file: `from sequence_salience.display
import palette` is an edge to display/palette.py, `from sequence_salience.methods import get_method`
to methods/__init__.py; the parent packages Python initialises on the way are not edges.

No edge is let through (ALLOWED_EDGES is empty; an entry would need its reason, and the test fails
when an allowed edge is gone). SalienceResult's display conveniences reach display/ through the
Renderer display registers (result.register_renderer), so display depends on result only.

Folders: each file stands for its folder (sequence_salience/display, frontend/src/salience, ...),
except the files directly in a tree's root (sequence_salience/errors.py, frontend/src/index.ts, ...):
those are the shared base and the entry points, and stand for themselves.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON_TREES = ("sequence_salience", "lit_app")
TS_TREE = "frontend/src"

Graph = dict[str, set[str]]

ALLOWED_EDGES: dict[tuple[str, str], str] = {}


def _python_module_file(name: str) -> str | None:
    """The repository path of module `name` (a .py file or a package's __init__.py), if it is ours."""
    if name.split(".")[0] not in PYTHON_TREES:
        return None
    base = ROOT / name.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path.relative_to(ROOT).as_posix()
    return None


def _python_package(path: pathlib.Path) -> str:
    """The package a file's relative imports start from: its folder (for an __init__.py, its own package)."""
    return ".".join(path.relative_to(ROOT).parts[:-1])


def python_graph() -> Graph:
    graph: Graph = {}
    for tree in PYTHON_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            targets = graph.setdefault(rel, set())
            package = _python_package(path)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                        module = ".".join(anchor + ([node.module] if node.module else []))
                    else:
                        module = node.module or ""
                    # `from pkg import name`: name is a submodule's file if there is one, else pkg's.
                    names = [f"{module}.{a.name}" if _python_module_file(f"{module}.{a.name}") else module
                             for a in node.names]
                else:
                    continue
                for name in names:
                    target = _python_module_file(name)
                    if target is not None and target != rel:
                        targets.add(target)
    return graph


_TS_IMPORT = re.compile(
    r"""(?:^|[;\s])(?:import|export)\s[^;'"]*?\sfrom\s*['"]([^'"]+)['"]"""  # import {a} from '...', export * from
    r"""|(?:^|[;\s])import\s*['"]([^'"]+)['"]"""  # import '...' (side effects)
    r"""|\bimport\(\s*['"]([^'"]+)['"]\s*\)""",  # import('...')
    re.MULTILINE | re.DOTALL,
)


def _strip_ts_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"(?m)(^|\s)//.*$", r"\1", text)


def _ts_target(source: pathlib.Path, spec: str) -> str | None:
    if not spec.startswith("."):
        return None  # a package (lit, vitest, ...)
    base = (source.parent / spec).resolve()
    stem = base.with_suffix("") if base.suffix in (".js", ".ts") else base
    for path in (stem.with_suffix(".ts"), stem / "index.ts"):
        if path.is_file():
            return path.relative_to(ROOT).as_posix()
    raise AssertionError(f"{source.relative_to(ROOT)} imports {spec!r}, which is not a file of the tree.")


def ts_graph() -> Graph:
    graph: Graph = {}
    for path in sorted((ROOT / TS_TREE).rglob("*.ts")):
        rel = path.relative_to(ROOT).as_posix()
        targets = graph.setdefault(rel, set())
        for match in _TS_IMPORT.finditer(_strip_ts_comments(path.read_text(encoding="utf-8"))):
            target = _ts_target(path, next(g for g in match.groups() if g))
            if target is not None and target != rel:
                targets.add(target)
    return graph


def folder_graph(graph: Graph, roots: tuple[str, ...]) -> Graph:
    """Each file's edges as edges of its folder; a file directly in a root stands for itself."""

    def node(path: str) -> str:
        folder = path.rsplit("/", 1)[0]
        return path if folder in roots else folder + "/"

    out: Graph = {}
    for source, targets in graph.items():
        edges = out.setdefault(node(source), set())
        edges.update(node(t) for t in targets if node(t) != node(source))
    return out


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted, as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _describe(graph: Graph, component: list[str]) -> str:
    members = set(component)
    return "; ".join(f"{a} -> {b}" for a in component for b in sorted(graph.get(a, ())) if b in members)


def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    # A hand-made graph: a -> b -> c -> a is one circle; d -> a and a self-free chain are not.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert folder_graph({"r/x/1.py": {"r/y/2.py", "r/3.py"}, "r/y/2.py": {"r/x/4.py"}}, ("r",)) == {
        "r/x/": {"r/y/", "r/3.py"}, "r/y/": {"r/x/"}}


def test_the_graphs_see_the_imports_of_every_kind():
    py = python_graph()
    # Module level, `from pkg import submodule`, a package's __init__ and a call-time import.
    assert "sequence_salience/errors.py" in py["sequence_salience/result.py"]
    assert "sequence_salience/display/palette.py" in py["sequence_salience/display/__init__.py"]
    assert "sequence_salience/methods/__init__.py" in py["sequence_salience/result.py"]
    assert "sequence_salience/salience.py" in py["sequence_salience/explain/faithfulness.py"]
    assert not any(t.startswith(("torch", "numpy")) for t in py["sequence_salience/result.py"])
    ts = ts_graph()
    assert "frontend/src/shared/request.ts" in ts["frontend/src/salience/controller.ts"]  # a multi-line import
    assert "frontend/src/shared/lit_module.ts" in ts["frontend/src/index.ts"]
    assert all(t.startswith(TS_TREE + "/") for ts_targets in ts.values() for t in ts_targets)


def _checked(graph: Graph) -> Graph:
    """The graph without ALLOWED_EDGES (each must still be there)."""
    out = {k: set(v) for k, v in graph.items()}
    for a, b in ALLOWED_EDGES:
        if a in graph:
            assert b in graph[a], f"{a} no longer imports {b}: remove the edge from ALLOWED_EDGES."
            out[a].discard(b)
    return out


@pytest.mark.parametrize("language", ["python", "typescript"])
def test_no_import_circle_between_files(language):
    graph = _checked(python_graph() if language == "python" else ts_graph())
    found = cycles(graph)
    assert not found, "Import circles between files (break each by moving the shared part down):\n" + "\n".join(
        _describe(graph, c) for c in found)


@pytest.mark.parametrize("language", ["python", "typescript"])
def test_no_import_circle_between_folders(language):
    graph = folder_graph(*((_checked(python_graph()), PYTHON_TREES) if language == "python" else (ts_graph(), (TS_TREE,))))
    found = cycles(graph)
    assert not found, "Import circles between folders (a folder may not import one that imports it back):\n" + \
        "\n".join(_describe(graph, c) for c in found)
