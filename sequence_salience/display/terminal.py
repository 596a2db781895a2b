"""Terminal rendering with rich: the coloured prompt and response, and a table of the top segments."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sequence_salience.display import palette
from sequence_salience.display.html import GRANULARITY_LABELS
from sequence_salience.display.view import View, facts_lines, visible_text, warnings


def _style(view: View, s: int, response: bool) -> str:
    if s < 0:
        return ""
    if view.seg.excluded[s]:
        return "dim"
    if response and s in view.target_segments:
        return "bold underline"
    c = view.color(s)
    if c is None:
        return ""
    return f"{c[1]} on {c[0].replace(' ', '')}"


def coloured_text(view: View, response: bool) -> Text:
    """The prompt (or response) with each segment's background in its salience colour."""
    out = Text()
    for p in view.pieces:
        if p.response == response:
            out.append(p.text, style=_style(view, p.seg, response))
    return out


def signed_bar(value: float, scale: float, half: int = 6) -> str:
    """A bar from a centre line: left for a negative value, right for a positive one (at least one
    block), so that -3 and +3 do not look alike. `scale` maps to `half` blocks."""
    n = max(1, min(half, round(half * abs(value) / scale))) if scale > 0 and value != 0 else 0
    left = " " * (half - n) + "█" * n if value < 0 else " " * half
    right = "█" * n + " " * (half - n) if value > 0 else " " * half
    return left + "│" + right


def top_table(view: View) -> Table:
    """The top segments: rank, value, a bar, the segment text (coloured), and where it is."""
    label = GRANULARITY_LABELS[view.granularity]
    table = Table(title=f"Top {label} · {view.method} · target: {view.describe_target()}", title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("salience", justify="right")
    table.add_column("", no_wrap=True)
    table.add_column(label[:-1] if label.endswith("s") else label, overflow="fold")
    table.add_column("in", style="dim")
    scale = max((abs(r.value) for r in view.ranked), default=1.0) or 1.0
    for i, r in enumerate(view.ranked):
        bg, fg = palette.color_for(r.value, view.scale)
        bar = signed_bar(r.value, scale) if view.signed else "█" * max(1, round(12 * abs(r.value) / scale))
        text = visible_text(r.text)
        table.add_row(
            str(i + 1), palette.format_value(r.value), Text(bar, style=bg.replace(" ", "")),
            Text(text[:80], style=f"{fg} on {bg.replace(' ', '')}"), "response" if r.in_response else "prompt",
        )
    return table


def renderable(view: View, with_text: bool = True) -> Group:
    """Prompt, response and the top table as one rich renderable."""
    parts = []
    if with_text:
        parts += [Text("Prompt", style="bold"), coloured_text(view, False), Text(""),
                  Text("Response", style="bold"), coloured_text(view, True), Text("")]
    parts += [top_table(view), Text(" · ".join(facts_lines(view)), style="dim")]
    parts += [Text("⚠ " + w, style="bold yellow") for w in warnings(view)]
    return Group(*parts)
