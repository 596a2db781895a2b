"""A self-contained HTML report of a method evaluation (plots as inline base64 PNG; no network).

`render_report(summary, rows, failures, title)` returns one HTML document: the verdicts,
the gap table (mean AOPC gap to each baseline with its bootstrap CI and win rate), the mean
deletion / insertion curves of every method and baseline, the gaps with their CIs as a bar
plot, the per-row gaps, and the rows that failed (with their line numbers).
`pairs_section` adds the paired comparisons with the reference method and the rows on which
the test cannot decide (the upper bound stays within the noise).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any

from sequence_salience.display.markup import esc as _esc  # every value written into the page goes through it

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
BASELINE_STYLE = {"random": ("#7f7f7f", "--"), "length": ("#bcbd22", ":")}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.beats{color:#1a7f37;font-weight:600}
.worse{color:#b42318;font-weight:600}.noise{color:#6e6e6e}img{max-width:100%}
small{color:#666}
"""


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _style(name: str, methods: Sequence[str]) -> tuple[str, str]:
    if name in methods:
        return COLOURS[methods.index(name) % len(COLOURS)], "-"
    return BASELINE_STYLE.get(name, ("#444444", "-."))


def curves_figure(summary: Mapping[str, Any]):
    """Mean deletion / insertion curves (relative to their start) of every method and baseline."""
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    modes = summary["modes"]
    fig = Figure(figsize=(5.2 * len(modes), 3.6))
    for i, mode in enumerate(modes):
        ax = fig.add_subplot(1, len(modes), i + 1)
        for name, ys in summary["mean_curves"][mode].items():
            colour, dash = _style(name, summary["methods"])
            ax.plot(summary["grid"], ys, dash, color=colour, label=name, marker="o", markersize=3)
        ax.set_title(f"{mode} (mean of {summary['n_rows']} rows)")
        ax.set_xlabel("fraction of segments " + ("removed" if mode == "deletion" else "revealed"))
        ax.set_ylabel("log p(target) - " + ("original" if mode == "deletion" else "all removed") + " (nats)")
        ax.axhline(0, color="#bbb", linewidth=0.8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gaps_figure(summary: Mapping[str, Any]):
    """Mean AOPC gap of each method to each baseline, with its bootstrap CI, per mode."""
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    modes, methods, baselines = summary["modes"], summary["methods"], summary["baselines"]
    fig = Figure(figsize=(5.2 * len(modes), 0.5 + 0.45 * len(methods) * len(baselines) + 1))
    for i, mode in enumerate(modes):
        ax = fig.add_subplot(1, len(modes), i + 1)
        labels, means, lo, hi, colours = [], [], [], [], []
        for m in methods:
            for b in baselines:
                s = summary["gaps"][mode][m][b]
                labels.append(f"{m} vs {b}")
                means.append(s["mean_gap"])
                lo.append(s["mean_gap"] - s["ci"][0])
                hi.append(s["ci"][1] - s["mean_gap"])
                colours.append(_style(m, methods)[0])
        y = list(range(len(labels)))[::-1]
        ax.barh(y, means, xerr=[lo, hi], color=colours, alpha=0.75, capsize=3)
        ax.set_yticks(y, labels, fontsize=8)
        ax.axvline(0, color="#444", linewidth=0.8)
        ax.set_title(f"{mode}: AOPC gap (nats), {int(summary['config']['level'] * 100)}% CI")
    fig.tight_layout()
    return fig


def _verdict_class(v: str) -> str:
    return "beats" if v.startswith("beats") else "worse" if v.startswith("worse") else "noise"


def render_report(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = (),
                  failures: Sequence[tuple[int, str]] = (), title: str = "Method evaluation",
                  settings: Mapping[str, Any] | None = None) -> str:
    """The whole HTML document (str). rows: dicts with "id", "line" and "evaluation" (optional table)."""
    methods, baselines, modes = summary["methods"], summary["baselines"], summary["modes"]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>",
             f"<p>{_esc(summary['n_rows'])} row(s) evaluated, {len(failures)} failed. AOPC gap = AOPC(method) - "
             "AOPC(baseline), in nats; &gt; 0: removing (deletion) or revealing (insertion) the segments the "
             "method ranks first changes log p(target) more than the baseline's order does. CI: percentile "
             f"bootstrap over rows ({_esc(summary['config']['n_boot'])} resamples).</p>",
             "<h2>Verdicts</h2><table><tr><th class=l>method</th><th class=l>verdict</th></tr>"]
    for m in methods:
        v = summary["verdicts"][m]
        parts.append(f"<tr><td class=l>{_esc(m)}</td><td class='l {_verdict_class(v)}'>{_esc(v)}</td></tr>")
    parts.append("</table><h2>Gaps to the baselines</h2><table><tr><th class=l>mode</th><th class=l>method</th>"
                 "<th class=l>baseline</th><th>mean gap</th><th>CI</th><th>win rate</th><th class=l>verdict</th>"
                 "</tr>")
    for mode in modes:
        for m in methods:
            for b in baselines:
                s = summary["gaps"][mode][m][b]
                parts.append(f"<tr><td class=l>{_esc(mode)}</td><td class=l>{_esc(m)}</td><td class=l>{_esc(b)}</td>"
                             f"<td>{s['mean_gap']:+.3f}</td><td>[{s['ci'][0]:+.3f}, {s['ci'][1]:+.3f}]</td>"
                             f"<td>{s['win_rate']:.0%}</td><td class='l {_verdict_class(s['verdict'])}'>"
                             f"{_esc(s['verdict'])}</td></tr>")
    parts.append("</table><h2>Mean AOPC</h2><table><tr><th class=l>mode</th>"
                 + "".join(f"<th>{_esc(k)}</th>" for k in methods + baselines) + "</tr>")
    for mode in modes:
        parts.append(f"<tr><td class=l>{_esc(mode)}</td>"
                     + "".join(f"<td>{summary['mean_aopc'][mode][k]:.3f}</td>" for k in methods + baselines)
                     + "</tr>")
    parts.append("</table>")
    extra = []
    if "reduction" in summary:
        extra.append("Input reduction, mean fraction of segments kept: " + ", ".join(
            f"{_esc(m)} {v:.0%}" for m, v in summary["reduction"].items()))
    if "ig_completeness" in summary:
        ig = summary["ig_completeness"]
        extra.append(f"Integrated gradients completeness: mean relative error {ig['mean_relative_error']:.1%}, "
                     f"max {ig['max_relative_error']:.1%}")
    if extra:
        parts.append("<p>" + "<br>".join(extra) + "</p>")
    parts.append(pairs_section(summary, rows))
    parts.append(f"<h2>Curves</h2><img alt='mean curves' src='{_png(curves_figure(summary))}'>")
    parts.append(f"<h2>Gaps with CIs</h2><img alt='gaps' src='{_png(gaps_figure(summary))}'>")
    if rows:
        parts.append("<h2>Per row</h2><table><tr><th class=l>line</th><th class=l>id</th><th>segments</th>"
                     + "".join(f"<th>{_esc(mode[:3])} {_esc(m)}−{_esc(b)}</th>" for mode in modes for m in methods
                               for b in baselines) + "</tr>")
        for r in rows:
            ev = r["evaluation"]
            parts.append(f"<tr><td class=l>{_esc(r['line'])}</td><td class=l>{_esc(r['id'])}</td>"
                         f"<td>{_esc(ev['n_segments'])}</td>"
                         + "".join(f"<td>{ev['gaps'][mode][m][b]:+.2f}</td>" for mode in modes for m in methods
                                   for b in baselines) + "</tr>")
        parts.append("</table>")
    if failures:
        parts.append("<h2>Failed rows</h2><table><tr><th>line</th><th class=l>error</th></tr>"
                     + "".join(f"<tr><td>{_esc(ln)}</td><td class=l>{_esc(msg)}</td></tr>" for ln, msg in failures)
                     + "</table>")
    if settings:
        parts.append("<h2>Settings</h2><pre>" + _esc(_pretty(settings)) + "</pre>")
    parts.append("<p><small>Written by sequence-salience evaluate.</small></p></body></html>")
    return "".join(parts)


def _pretty(obj: Any) -> str:
    import json  # pylint: disable=import-outside-toplevel

    return json.dumps(obj, indent=2, ensure_ascii=False)


def pairs_section(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = ()) -> str:
    """The paired comparisons with the reference method and the rows the test cannot decide (HTML;
    every value escaped). Empty for a summary without them."""
    esc = _esc  # display.markup.esc, the one escaping helper
    parts = []
    pairs = summary.get("pairs") or {}
    if any(pairs.values()):
        level = int(round(summary["config"]["level"] * 100))
        ref = summary.get("reference", "")
        parts.append(f"<h2>Paired comparisons with {esc(str(ref))}</h2><p>Per row, AOPC(method) - AOPC("
                     f"{esc(str(ref))}) in nats; mean over rows, {level}% percentile bootstrap CI over rows, and "
                     "the rows where the method is better, worse or tied.</p><table><tr><th class=l>mode</th>"
                     "<th class=l>method</th><th>mean difference</th><th>CI</th><th>better</th><th>worse</th>"
                     "<th>tied</th><th class=l>verdict</th></tr>")
        for mode, by_m in pairs.items():
            for m, p in by_m.items():
                cells = [f"{p['mean_diff']:+.3f}", f"[{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}]", p["better"],
                         p["worse"], p["tied"]]
                parts.append(f"<tr><td class=l>{esc(str(mode))}</td><td class=l>{esc(str(m))}</td>"
                             + "".join(f"<td>{esc(str(c))}</td>" for c in cells)
                             + f"<td class='l {_verdict_class(str(p['verdict']))}'>{esc(str(p['verdict']))}</td>"
                             "</tr>")
        parts.append("</table>")
    if "not_decidable" in summary:
        n = summary["n_rows"]
        parts.append("<h2>Rows the test cannot decide</h2><p>On these rows even the best order the test found "
                     "(its upper bound) does not beat random and length by the noise, so no method can pass "
                     "there: a method that is not clearly worse gets “not decidable on this prompt”, not a "
                     "failure.</p>"
                     "<table><tr><th class=l>mode</th><th>rows not decidable</th><th>mean AOPC of the best order"
                     "</th><th class=l>rows</th></tr>")
        for mode, k in summary["not_decidable"].items():
            which = [f"{r.get('line', '')}: {r.get('id', '')}" for r in rows
                     if "decidable" in r.get("evaluation", {}) and not r["evaluation"]["decidable"][mode]]
            best = summary.get("mean_upper_bound", {}).get(mode)
            parts.append(f"<tr><td class=l>{esc(str(mode))}</td><td>{esc(f'{k} of {n}')}</td>"
                         f"<td>{esc('' if best is None else f'{best:.3f}')}</td>"
                         f"<td class=l>{esc(', '.join(which))}</td></tr>")
        parts.append("</table>")
    return "".join(parts)
