"""The one escaping rule of every HTML writer: display (CLI and notebook HTML), compare, evaluate's report.

`esc(value)` is str(value) with & < > " ' replaced by character references: safe as element text
and inside a quoted attribute value (every writer quotes its attributes). Numbers formatted with
a format spec (f"{x:.3f}") need none: a string from a file fails the spec instead of passing.
Nothing from a result, a saved file, a flag or a batch row is written into a <style> element, a
<script> (none is written) or an unquoted attribute.
"""

from __future__ import annotations

import html
from typing import Any


def esc(value: Any) -> str:
    """str(value), HTML-escaped for text and quoted attribute values."""
    return html.escape(str(value), quote=True)
