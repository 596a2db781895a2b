"""The shared model is reached one way: outside lit_app/model/, no code reads its raw `lm` or `lock`.

`SharedLM` (lit_app/model/shared_model.py) owns the loaded model and its lock (the scheduler). Every
other room goes through its methods: `model(priority)` to run a core function on the model held,
`tokens`, `generate`, `salience`, ... (docs/architecture.md, "LIT rooms"). Tests may hold the lock to
make the model busy; lit_app may not.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_ROOM = ROOT / "lit_app" / "model"
RAW = ("lm", "lock")  # SharedLM's attributes that hand out the model or its lock without the scheduler


def raw_reaches(source: str, name: str) -> list[str]:
    """`file:line expression` for every `<x>.lm` / `<x>.lock` in `source`."""
    return [f"{name}:{node.lineno} {ast.unparse(node)}" for node in ast.walk(ast.parse(source, name))
            if isinstance(node, ast.Attribute) and node.attr in RAW]


def test_the_finder_sees_a_raw_reach_and_only_that():
    source = ("with shared.lock:\n    x = self._shared.lm.tokenizer\n"
              "with shared.model() as lm:\n    lm.tokenize('a')\nself._lock = 1\n")
    assert raw_reaches(source, "f.py") == ["f.py:1 shared.lock", "f.py:2 self._shared.lm"]


def test_no_room_outside_the_shared_model_reaches_its_raw_model_or_lock():
    files = [p for p in sorted((ROOT / "lit_app").rglob("*.py")) if MODEL_ROOM not in p.parents]
    assert any(p.name == "inside.py" for p in files) and not any(p.name == "shared_model.py" for p in files)
    found = [r for p in files for r in raw_reaches(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())]
    assert not found, ("Raw reaches into the shared model (use SharedLM's methods; `model(priority)` to run a core "
                       "function on the model held):\n" + "\n".join(found))
