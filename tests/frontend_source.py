"""Constants the TypeScript modules declare, read from frontend/src wherever their file lives.

The server's layouts name the frontend's custom elements (lit_app/serving/layouts.py); tests check that
both sides spell them alike. The declaration is looked up in every .ts file under frontend/src,
so moving a module to another folder keeps the check; a missing or doubled declaration fails it.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "frontend" / "src"


def exported_string(name: str, src: Path = SRC) -> str:
    """The value of `export const <name> = '<value>'` declared once under `src`; AssertionError otherwise."""
    pattern = re.compile(rf"export const {re.escape(name)}\s*=\s*['\"]([^'\"]*)['\"]")
    found = [(path, m.group(1)) for path in sorted(src.rglob("*.ts"))
             for m in pattern.finditer(path.read_text(encoding="utf-8"))]
    assert len(found) == 1, (f"`export const {name} = '...'` is declared {len(found)} times under {src}"
                             f" ({', '.join(str(p) for p, _ in found) or 'nowhere'}); expected once.")
    return found[0][1]
