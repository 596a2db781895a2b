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

lit_app/ has layers besides: each of its folders may import only the folders LIT_APP_MAY_IMPORT names
(below it), its base files nothing above them, and only its entry points may import anything.
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

# lit_app/'s layers: each folder and the folders it may import (besides itself), bottom to top. A file
# directly in lit_app/ is either the shared base (imports nothing of lit_app but the base) or an entry
# point (may import anything; nothing imports it but another entry point).
LIT_APP = "lit_app"
LIT_APP_BASE = ("lit_app/__init__.py", "lit_app/errors.py", "lit_app/memory.py")
LIT_APP_ENTRY_POINTS = ("lit_app/server.py", "lit_app/plugin.py", "lit_app/notebook.py")
LIT_APP_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "schema": (),  # field names and specs, the served methods, input parsing
    "edge": ("schema",),  # the HTTP rules, clients, disconnects
    "model": ("schema", "edge"),  # the shared model, its parts and its jobs
    "wrappers": ("schema", "edge", "model"),  # the LIT model wrappers
    "data": ("schema", "edge"),  # the datasets
    "serving": ("schema", "edge", "model", "wrappers", "data"),  # flags, served models, layouts, client root
}


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


def _lit_app_place(path: str) -> str:
    """A lit_app file's folder name, or the file itself for one directly in lit_app/."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else path


def lit_app_upward_imports(graph: Graph) -> list[str]:
    """Every import between lit_app's files that LIT_APP_MAY_IMPORT and the base / entry point rule do not allow."""
    wrong = []
    for source, targets in sorted(graph.items()):
        if not source.startswith(LIT_APP + "/"):
            continue
        here = _lit_app_place(source)
        for target in sorted(t for t in targets if t.startswith(LIT_APP + "/")):
            there = _lit_app_place(target)
            if source in LIT_APP_ENTRY_POINTS:
                allowed = True
            elif target in LIT_APP_ENTRY_POINTS:
                allowed = False
            elif target in LIT_APP_BASE:
                allowed = True
            elif source in LIT_APP_BASE:
                allowed = False
            else:
                allowed = there == here or there in LIT_APP_MAY_IMPORT.get(here, ())
            if not allowed:
                wrong.append(f"{source} -> {target}")
    return wrong


def test_every_lit_app_file_has_a_place_in_the_layers():
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / LIT_APP).rglob("*.py"))
    unplaced = [f for f in files if _lit_app_place(f) not in (*LIT_APP_MAY_IMPORT, *LIT_APP_BASE, *LIT_APP_ENTRY_POINTS)]
    assert not unplaced, ("lit_app files outside the layers (put each in a folder of LIT_APP_MAY_IMPORT, or name a new "
                          f"folder there with what it may import): {unplaced}")
    assert {f.split("/")[1] for f in files if f.count("/") > 1} == set(LIT_APP_MAY_IMPORT)  # no folder left unnamed


def test_the_layer_rule_finds_an_upward_import_and_only_that():
    graph = {
        "lit_app/schema/fields.py": {"lit_app/errors.py", "lit_app/schema/inputs.py"},  # the base; its own folder
        "lit_app/model/jobs.py": {"lit_app/edge/clients.py"},  # downward
        "lit_app/edge/security.py": {"lit_app/model/memory.py"},  # upward
        "lit_app/data/datasets.py": {"lit_app/wrappers/wrapper.py"},  # sideways, not allowed
        "lit_app/serving/layouts.py": {"lit_app/server.py"},  # an entry point imported
        "lit_app/errors.py": {"lit_app/schema/fields.py"},  # the base importing a folder
        "lit_app/plugin.py": {"lit_app/server.py", "lit_app/wrappers/salience.py"},  # an entry point may
    }
    assert lit_app_upward_imports(graph) == [
        "lit_app/data/datasets.py -> lit_app/wrappers/wrapper.py",
        "lit_app/edge/security.py -> lit_app/model/memory.py",
        "lit_app/errors.py -> lit_app/schema/fields.py",
        "lit_app/serving/layouts.py -> lit_app/server.py",
    ]


def test_lit_app_imports_only_go_down_its_layers():
    wrong = lit_app_upward_imports(python_graph())
    assert not wrong, ("lit_app imports against its layers (LIT_APP_MAY_IMPORT; move the shared part down, or "
                       "pass it in from above):\n" + "\n".join(wrong))
