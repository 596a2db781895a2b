"""sequence_salience.display on tiny random models: HTML, JSON round-trip, palette parity with the TS module, heatmaps."""

from __future__ import annotations

import dataclasses
import html.parser
import json
import math
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import aggregate, display
from sequence_salience.display import palette

REPO = pathlib.Path(__file__).resolve().parents[2]
FRONTEND = REPO / "frontend"

PROMPTS = [
    pytest.param("Alice has three apples. Bob has two apples.\n\nHow many <apples> & pears?", " Five.", id="plain"),
    pytest.param("café naïve 東京 😀\nQ: What is 2 + 3? A:", " 5. 😀 done", id="unicode"),
    pytest.param("  leading spaces and trailing  ", " x", id="spaces"),
]


@pytest.fixture(scope="module")
def results(llama):
    out = {}
    for p in PROMPTS:
        prompt, target = p.values
        out[p.id] = ss.compute_salience(llama, prompt, target, methods=ss.list_methods(),
                                        config=ss.SalienceConfig(ig_steps=4))
    return out


class _Collector(html.parser.HTMLParser):
    """Text inside each element with a given class, and every tag/attribute seen."""

    def __init__(self, classes):
        super().__init__(convert_charrefs=True)
        self.classes = set(classes)
        self.stack: list[set[str]] = []
        self.text = {c: [] for c in classes}
        self.spans: list[tuple[dict, str]] = []  # (attrs, text) of span elements with data-s
        self.tags: list[tuple[str, dict]] = []
        self._span: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in ("br", "meta"):
            return
        self.stack.append(set((a.get("class") or "").split()))
        if tag == "span" and "data-s" in a:
            self._span = {**a, "_text": ""}

    def handle_endtag(self, tag):
        if tag in ("br", "meta"):
            return
        self.stack.pop()
        if tag == "span" and self._span is not None:
            self.spans.append(self._span)
            self._span = None

    def handle_data(self, data):
        open_classes = set().union(*self.stack) if self.stack else set()
        for c in self.classes & open_classes:
            self.text[c].append(data)
        if self._span is not None:
            self._span["_text"] += data


def _parse(doc: str) -> _Collector:
    p = _Collector(["ss-prompt", "ss-response", "ss-top"])
    p.feed(doc)
    p.close()
    assert not p.stack, "unbalanced tags"
    return p


@pytest.mark.parametrize("granularity", [g for g in aggregate.GRANULARITIES if g != "regex"] + ["regex"])
@pytest.mark.parametrize("case", [p.id for p in PROMPTS])
def test_html_contains_every_prompt_and_response_character_once_in_order(results, case, granularity):
    r = results[case]
    pattern = r"[^ ]+" if granularity == "regex" else None
    doc = display.render_html(r, "grad_x_input", granularity, pattern=pattern)
    p = _parse(doc)
    assert "".join(p.text["ss-prompt"]) == r.text[: r.prompt_end]
    assert "".join(p.text["ss-response"]) == r.text[r.prompt_end:]


def test_html_is_self_contained(results):
    doc = display.render_html(results["plain"], "integrated_gradients", "sentence", title="x <y>")
    lowered = doc.lower()
    for needle in ("http:", "https:", "//", "<script", "<link", "<img", "@import", "url(", "src="):
        if needle == "//":
            assert "://" not in lowered
        else:
            assert needle not in lowered, needle
    p = _parse(doc)
    assert [t for t, _ in p.tags][:4] == ["html", "head", "meta", "title"]
    assert "x <y>" in "".join(p.text.get("ss-title", [])) or "x &lt;y&gt;" in doc


def test_html_colours_and_top_list_follow_the_browser_rules(results):
    """Each segment's background is colorFor(sum of its tokens' salience) with the scale set
    outside the target; the top list is sorted by |value| with the target left out."""
    r = results["plain"]
    t0, t1 = 1, 3
    doc = display.render_html(r, "grad_x_input", "word", target=(t0, t1), top=5)
    tok = r.matrices["grad_x_input"][t0:t1].sum(0)  # [N], linear method: sum of rows
    seg = aggregate.segment(r.text, r.offsets, "word")
    sums: dict[int, float] = {}
    for i, s in enumerate(seg.token_segment.tolist()):
        sums[s] = sums.get(s, 0.0) + float(tok[i])
    target_segs = {int(seg.token_segment[r.n_prompt_tokens + t]) for t in range(t0, t1)}
    scale = max(abs(v) for s, v in sums.items() if s not in target_segs)
    cs = palette.ColorScale(signed=True, scale=scale)
    p = _parse(doc)
    checked = 0
    for span in p.spans:
        s = int(span["data-s"])
        if "ss-tgt" in span["class"] or "ss-markup" in span["class"]:
            assert s in target_segs or seg.excluded[s]
            continue
        bg, fg = palette.color_for(sums.get(s, 0.0), cs)
        assert span["style"] == f"background:{bg};color:{fg}"
        checked += 1
    assert checked > 5
    expected = sorted((s for s in sums if s not in target_segs and sums[s] != 0 and not seg.excluded[s]),
                      key=lambda s: (-abs(sums[s]), s))[:5]
    assert [int(a["data-rank-s"]) for t, a in p.tags if t == "li"] == expected


def test_unsigned_method_uses_the_sequential_map(results):
    doc = display.render_html(results["plain"], "grad_norm", "word")
    assert "Magnitude (sequential)" in doc
    assert palette.legend_gradient(palette.ColorScale(False, 1.0)).split(",")[0] in doc or "rgb(255, 255, 255)" in doc


def test_repr_html_is_a_fragment_and_show_prints_outside_a_notebook(results, capsys):
    r = results["plain"]
    frag = r._repr_html_()
    assert frag.startswith('<div class="ss-salience">') and "<html" not in frag
    r.show(method="grad_norm", granularity="sentence", target=(0, 2))
    out = capsys.readouterr().out
    assert "Top sentences" in out and "grad_norm" in out
    assert "Alice has three apples." in out


def test_to_html_writes_one_file(results, tmp_path):
    path = results["unicode"].to_html(tmp_path / "out.html", method="grad_x_input", granularity="line")
    text = pathlib.Path(path).read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "東京 😀" in text
    assert os.listdir(tmp_path) == ["out.html"]  # no temporary files left behind


@pytest.mark.parametrize("kwargs, match", [
    ({"method": "nope"}, "Unknown salience method"),
    ({"granularity": "chapter"}, "Unknown granularity"),
    ({"target": (0, 99)}, "outside"),
    ({"granularity": "regex"}, "needs a pattern"),
    ({"granularity": "regex", "pattern": "(?<=a)b"}, "lookbehind"),
    ({"intensity": 0}, "intensity"),
])
def test_bad_display_options_raise_clear_errors(results, kwargs, match):
    with pytest.raises(ss.SalienceError, match=match):
        display.render_html(results["plain"], **kwargs)


def _assert_results_equal(a, b):
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        _assert_values_equal(x, y, f.name)


def _assert_values_equal(x, y, where):
    if isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray), where
        assert x.dtype == y.dtype and x.shape == y.shape, where
        assert x.tobytes() == y.tobytes(), where  # bit-exact, NaN included
    elif isinstance(x, dict) or hasattr(x, "items"):
        assert set(x) == set(y), where
        for k in x:
            _assert_values_equal(x[k], y[k], f"{where}[{k!r}]")
    elif isinstance(x, float) and math.isnan(x):
        assert isinstance(y, float) and math.isnan(y), where
    else:
        assert type(x) is type(y) and x == y, where


def test_json_round_trip_is_exact(results, tmp_path):
    r = results["unicode"]
    extra = {}
    names = {f.name for f in dataclasses.fields(r)}
    if "spans" in names:  # direct span results keyed by (t0, t1), when the library has them
        extra["spans"] = {(0, 2): {"grad_norm": np.array([0.5, np.nan, -0.0], dtype=np.float32)}}
    if "span_ig_errors" in names:
        extra["span_ig_errors"] = {(0, 2): float("nan"), (1, 3): 0.25}
    r = dataclasses.replace(r, **extra)
    path = r.to_json(tmp_path / "r.json", meta={"model": "tiny", "row": 3})
    raw = pathlib.Path(path).read_text(encoding="utf-8")

    def _reject(c):
        raise AssertionError(f"non-standard JSON constant {c}")

    obj = json.loads(raw, parse_constant=_reject)  # strict JSON (no NaN / Infinity literals)
    assert obj["format"] == "sequence_salience.SalienceResult" and obj["result"]["text"] == r.text
    back = ss.SalienceResult.load(path)
    _assert_results_equal(r, back)
    again, meta = display.load(path, with_meta=True)
    assert meta == {"model": "tiny", "row": 3}
    # What the loaded result computes is identical too.
    for m in r.matrices:
        np.testing.assert_array_equal(back.span_salience(m, 1, 4), r.span_salience(m, 1, 4))
    assert display.render_html(back, "grad_x_input", "word") == display.render_html(r, "grad_x_input", "word")


@pytest.mark.parametrize("content, match", [
    ("not json", "not valid JSON"),
    ('{"format": "other"}', "not a saved SalienceResult"),
    ('{"format": "sequence_salience.SalienceResult", "version": 99, "result": {}}', "version"),
])
def test_loading_a_bad_file_is_a_clear_error(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ss.SalienceError, match=match):
        display.load(path)
    with pytest.raises(ss.SalienceError, match="does not exist"):
        display.load(tmp_path / "missing.json")


def test_heatmap_has_segment_and_token_labels_and_the_aggregated_values(llama):
    r = ss.compute_salience(llama, "Alice has three apples. Bob has two.", " Five apples", methods=("grad_x_input",))
    fig = display.heatmap(r, granularity="word")
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Alice", "has", "three", "apples", ".", "Bob", "has",
                                                           "two", "."]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        " ".join(r.tokens[r.n_prompt_tokens + t].split()) or repr(r.tokens[r.n_prompt_tokens + t])
        for t in range(r.num_targets)
    ]
    # Column "three" is the sum over that word's tokens, per target row.
    seg = aggregate.segment(r.text, r.offsets, "word")
    s_three = [s for s in range(len(seg)) if r.text[seg.starts[s]:seg.ends[s]].strip() == "three"][0]
    toks = np.flatnonzero(seg.token_segment == s_three)
    shown = ax.images[0].get_array()
    np.testing.assert_allclose(shown[:, 2], r.matrices["grad_x_input"][:, toks].sum(1), rtol=1e-6)
    # A target span keeps only its rows; sentences give two columns.
    fig2 = display.heatmap(r, granularity="sentence", target=(1, 2))
    ax2 = fig2.axes[0]
    assert [t.get_text() for t in ax2.get_xticklabels()] == ["Alice has three apples.", "Bob has two."]
    assert len(ax2.get_yticklabels()) == 1


def test_heatmap_colormap_uses_the_palette():
    cmap = display.colormap(True)
    assert cmap.N == 2 * palette.LEVELS + 1
    lo, mid, hi = cmap(0), cmap(palette.LEVELS), cmap(2 * palette.LEVELS)
    assert [round(c * 255) for c in lo[:3]] == list(palette.NEGATIVE)
    assert [round(c * 255) for c in mid[:3]] == list(palette.WHITE)
    assert [round(c * 255) for c in hi[:3]] == list(palette.POSITIVE)


# ----------------------------------------------------------------------------
# Palette parity: the TypeScript colormap.ts, run by node, and palette.py give the same strings.

def _palette_cases():
    rng = np.random.default_rng(0)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1 / 128, -1 / 128, 3 / 128, 0.0078125, 2.0, -7.5, 1e-9, None,
              *rng.normal(size=60).tolist(), *(rng.normal(size=30) * 1e-3).tolist()]
    values += [k / 128 for k in range(-130, 131, 1)]  # every quantisation boundary and tie
    scales = [[True, 1.0, 1.0], [False, 1.0, 1.0], [True, 0.37, 2.5], [False, 3e-3, 0.25], [True, 12.0, 4.0]]
    color_for = [[v, s, sc, it] for v in values for s, sc, it in scales]
    fmt = [0.0, 1.0, -1.0, 0.125, 0.0125, 1.0005, 9.9995, 99.995, 9999.5, 9999.4, 10000.0, 12345.0, 0.001, 0.00099995,
           0.0009999, 1e-4, -2.5e-7, 1.5e20, 123.456, -0.1, 0.3, 2 / 3, None, *rng.normal(size=40).tolist(),
           *(10.0 ** rng.uniform(-8, 8, size=40)).tolist()]
    max_abs = [[0.0, -3.0, 2.0], [], [0.0, 0.0], [None, 1.5, -2.5], [1e-12]]
    rgb = [[0, 0, 0], [255, 255, 255], [178, 24, 43], [33, 102, 172], [84, 39, 143], [200, 200, 200], [128, 128, 128]]
    return {"colorFor": color_for, "scales": scales, "formatValue": fmt, "maxAbs": max_abs, "rgb": rgb}


def _nan(v):
    return float("nan") if v is None else v


def test_palette_equals_the_typescript_colormap(tmp_path):
    node = shutil.which("node")
    esbuild = FRONTEND / "node_modules" / ".bin" / "esbuild"
    assert node and esbuild.exists(), "node and frontend/node_modules are needed (make setup installs them)"
    bundle = tmp_path / "colormap.mjs"
    subprocess.run([str(esbuild), str(FRONTEND / "src" / "shared" / "colormap.ts"), "--format=esm", f"--outfile={bundle}",
                    "--log-level=warning"], check=True)
    cases = _palette_cases()
    out = subprocess.run([node, str(REPO / "tests" / "unit" / "colormap_oracle.mjs"), str(bundle)],
                         input=json.dumps(cases), capture_output=True, text=True, check=True)
    ts = json.loads(out.stdout)
    assert ts["constants"] == {"NEGATIVE": list(palette.NEGATIVE), "POSITIVE": list(palette.POSITIVE),
                               "SEQUENTIAL": list(palette.SEQUENTIAL), "LEVELS": palette.LEVELS}
    py_color = [list(palette.color_for(_nan(v), palette.ColorScale(s, sc, it))) for v, s, sc, it in cases["colorFor"]]
    assert py_color == ts["colorFor"]
    for (signed, scale, intensity), stops in zip(cases["scales"], ts["legendStops"]):
        assert [list(x) for x in palette.legend_stops(palette.ColorScale(signed, scale, intensity), 5)] == stops
    assert [palette.legend_gradient(palette.ColorScale(*s)) for s in cases["scales"]] == ts["legendGradient"]
    assert [palette.format_value(_nan(v)) for v in cases["formatValue"]] == ts["formatValue"]
    assert [palette.max_abs([_nan(v) for v in vs]) for vs in cases["maxAbs"]] == ts["maxAbs"]
    assert [palette.text_color_on(tuple(c)) for c in cases["rgb"]] == ts["textColorOn"]


def test_a_partial_span_result_renders_and_round_trips(llama, tmp_path):
    """compute_span_result (one backward for one span, no matrices) renders for its span only."""
    from sequence_salience.salience import compute_span_result

    part = compute_span_result(llama, "Alice has three apples.", " Five apples", methods=("grad_x_input",), t0=1, t1=3)
    assert not part.matrices
    full = ss.compute_salience(llama, "Alice has three apples.", " Five apples", methods=("grad_x_input",))
    a = display.render_html(part, "grad_x_input", "word", target=(1, 3))
    b = display.render_html(full, "grad_x_input", "word", target=(1, 3))
    assert _parse(a).text["ss-prompt"] == _parse(b).text["ss-prompt"]
    va = display.make_view(part, None, "word", target=(1, 3)).values
    vb = display.make_view(full, None, "word", target=(1, 3)).values
    np.testing.assert_allclose(va, vb, rtol=1e-5, atol=1e-9)
    with pytest.raises(ss.SalienceError, match="was not computed"):
        display.render_html(part, "grad_x_input", "word")  # the whole response was not computed
    path = part.to_json(tmp_path / "part.json")
    _assert_results_equal(part, ss.SalienceResult.load(path))


def test_blank_segments_are_listed_visibly():
    from sequence_salience.display.view import visible_text

    assert visible_text("  Hello\n  world ") == "Hello world"
    assert visible_text("\n\n") == "↵↵" and visible_text("  ") == "␣" and visible_text("") == "∅"


def test_heatmap_row_normalisation_scales_each_row_to_its_largest_magnitude(llama):
    r = ss.compute_salience(llama, "Alice has three apples. Bob has two.", " Five apples", methods=("grad_x_input",))
    values, _, _, _ = display.segment_matrix(r, "grad_x_input", "word")
    shown = np.asarray(display.heatmap(r, "grad_x_input", "word", normalize="row").axes[0].images[0].get_array())
    np.testing.assert_allclose(shown, values / np.abs(values).max(1, keepdims=True), rtol=1e-6)
    assert np.allclose(np.abs(shown).max(1), 1.0)
    with pytest.raises(ss.SalienceError, match="normalize"):
        display.heatmap(r, normalize="column")


def test_regex_ranks_the_matches_and_leaves_the_text_between_them_unscored(results):
    # Issue 19: with \d+ the numbers are the segments asked about; the text between them is context.
    r = results["unicode"]
    view = display.make_view(r, "grad_norm", "regex", pattern=r"\d+", top=20)
    kinds = view.seg.kinds
    assert {kinds[x.seg] for x in view.ranked} == {"match"}  # only numbers in the top list
    assert {r.text[int(view.seg.starts[x.seg]): int(view.seg.ends[x.seg])] for x in view.ranked} <= {"2", "3", "5"}
    # The sums of the matches are unchanged, the gaps have no value and no colour.
    from sequence_salience.display.view import token_values
    raw = aggregate.aggregate(token_values(r, "grad_norm", *view.target), view.seg, "sum")
    for s, kind in enumerate(kinds):
        if kind == "match":
            assert view.values[s] == raw[s]
        else:
            assert math.isnan(view.values[s]) and view.color(s) is None


def test_terminal_bars_are_signed_for_signed_methods():
    # Issue 19: bars for -3 and +3 looked identical.
    from sequence_salience.display.terminal import signed_bar

    assert signed_bar(-3.0, 3.0) == "██████│      "
    assert signed_bar(3.0, 3.0) == "      │██████"
    assert signed_bar(-1.0, 3.0) == "    ██│      "
    assert signed_bar(0.01, 3.0) == "      │█     "  # at least one block
    assert signed_bar(0.0, 3.0) == "      │      "


def test_html_boxes_only_a_clicked_part_of_the_response_and_never_blank_text(results):
    # Issue 19: the whole response was boxed word by word, with an empty box at its end.
    r = results["plain"]
    whole = _parse(display.render_html(r, "grad_x_input", "word"))
    assert not any("ss-tgt" in span["class"] for span in whole.spans)
    part = _parse(display.render_html(r, "grad_x_input", "token", target=(0, r.num_targets - 1)))
    boxed = [span for span in part.spans if "ss-tgt" in span["class"]]
    assert boxed
    seg = aggregate.segment(r.text, r.offsets, "token")
    for span in boxed:
        s = int(span["data-s"])
        assert r.text[int(seg.starts[s]): int(seg.ends[s])].strip() != ""


def test_ig_completeness_beyond_the_tolerance_is_a_warning_in_html_and_terminal(results):
    # Issue 19: "IG completeness error: -325.7" next to log p = -25.8 was plain text. With 4 steps on a
    # tiny random model the relative error is large; the relative error is |err| / |sum - err|.
    from sequence_salience.display.view import IG_TOLERANCE, token_values

    r = results["plain"]
    view = display.make_view(r, "integrated_gradients", "word")
    err = float(np.sum(r.extras["ig_completeness_error"], dtype=np.float64))
    total = float(np.sum(token_values(r, "integrated_gradients", 0, r.num_targets), dtype=np.float64))
    assert view.completeness_relative == pytest.approx(abs(err) / abs(total - err), rel=1e-9)
    assert view.completeness_relative > IG_TOLERANCE  # 4 steps on a random model: far off
    doc = display.render_html(r, "integrated_gradients", "word")
    # The advice holds whatever the error does as steps double (issue 35): the steps search
    # (ig_search_tolerance), else grad_x_input.
    assert 'class="ss-warn"' in doc and "ig_search_tolerance" in doc and "grad_x_input" in doc
    from rich.console import Console
    from sequence_salience.display.terminal import renderable

    console = Console(record=True, width=200)
    console.print(renderable(view))
    assert "ig_search_tolerance" in console.export_text()
    assert display.make_view(r, "grad_x_input", "word").completeness_relative is None


def test_result_extras_are_declared_by_the_methods_and_saved(llama, tmp_path):
    """grad_norm and IG declare their extras; a result keeps them under those names, and JSON keeps them."""
    declared = {m: [e.name for e in ss.get_method(m).result_extras] for m in ss.list_methods()}
    assert declared == {"grad_norm": ["grad_gram"], "grad_x_input": [], "integrated_gradients":
                        ["ig_completeness_error", "ig_steps_used", "ig_forwards"], "smooth_grad": []}
    assert "grad_gram" not in {f.name for f in dataclasses.fields(ss.SalienceResult)}
    r = ss.compute_salience(llama, "Alice has two apples.", " Bob has one.", methods=("grad_x_input",))
    assert dict(r.extras) == {}  # neither method ran
    r = ss.compute_salience(llama, "Alice has two apples.", " Bob has one.",
                            methods=("grad_norm", "integrated_gradients"), config=ss.SalienceConfig(ig_steps=4))
    n, t = len(r.ids), r.num_targets
    assert r.extras["grad_gram"].shape == (n, t, t) and r.extras["ig_completeness_error"].shape == (t,)
    back = ss.SalienceResult.load(r.to_json(tmp_path / "r.json"))
    for name, value in r.extras.items():
        np.testing.assert_array_equal(back.extras[name], value)


def test_files_saved_before_the_extras_load_into_extras(llama):
    """tests/data/result_before_extras.json was written by the library when grad_gram and
    ig_completeness_error were fields of the result (main 31e90a1, tiny llama seed 0, ig_steps=4)."""
    path = pathlib.Path(__file__).parent.parent / "data" / "result_before_extras.json"
    raw = json.loads(path.read_text(encoding="utf-8"))["result"]
    assert "extras" not in raw and "grad_gram" in raw  # the old layout
    old = ss.SalienceResult.load(path)
    now = ss.compute_salience(llama, "Alice has two apples.", " Bob has one.",
                              methods=("grad_norm", "integrated_gradients"), config=ss.SalienceConfig(ig_steps=4))
    assert set(old.extras) == {"grad_gram", "ig_completeness_error"}
    for name in old.extras:
        np.testing.assert_allclose(old.extras[name], now.extras[name], rtol=1e-5, atol=1e-7)
    gram = old.extras["grad_gram"][:, 1:4, 1:4].sum((1, 2))  # [N]: the norm of the summed gradients, squared
    np.testing.assert_allclose(old.span_salience("grad_norm", 1, 4), np.sqrt(np.clip(gram, 0, None)), rtol=1e-6)
    assert old.has_span("grad_norm", 1, 4)
