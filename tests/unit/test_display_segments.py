"""Segment methods' values in display (terminal, HTML, notebook) on a tiny random Llama.

References: the SegmentSalience's own `values` (computed by sequence_salience.ablation, whose
exactness tests/unit/test_ablation.py checks against plain forwards); the segmentation of
`aggregate.segment` at the method's granularity; the registry's `signed`; html.escape.
"""

from __future__ import annotations

import dataclasses
import html
import re

import numpy as np
import pytest

import sequence_salience as ss
from sequence_salience import ablation, aggregate, display
from sequence_salience.ablation import AblationConfig
from sequence_salience.display import palette
from sequence_salience.methods import ablation_surrogate, get_any_method, leave_one_out

# Markup and entities in the prompt: every one must come out escaped.
PROMPT = ('Alice has three apples. Bob has <b>two</b> apples & "pears".\n\n'
          "<script>alert('x')</script> How many apples?")
TARGET = "Five."


@pytest.fixture(scope="module")
def computed(llama):
    """(method, granularity) -> SegmentSalience of the pair."""
    out = {}
    for method in (leave_one_out.NAME, ablation_surrogate.NAME):
        for granularity in ("sentence", "word"):
            out[method, granularity] = ablation.segment_salience(
                llama, PROMPT, TARGET, method, granularity=granularity, config=AblationConfig(surrogate_masks=16))
    out[leave_one_out.NAME, "regex"] = ablation.segment_salience(llama, PROMPT, TARGET, leave_one_out.NAME,
                                                                 granularity="regex", pattern=r"[A-Z][a-z]+")
    return out


@pytest.mark.parametrize("key", [(leave_one_out.NAME, "sentence"), (leave_one_out.NAME, "word"),
                                 (ablation_surrogate.NAME, "sentence"), (ablation_surrogate.NAME, "word"),
                                 (leave_one_out.NAME, "regex")], ids=lambda k: "-".join(k))
def test_view_values_summed_per_segment_are_the_methods_values(computed, key):
    seg = computed[key]
    view = display.make_view(seg)  # the method's own granularity, pattern and span by default
    assert (view.method, view.granularity, view.target) == (seg.method, seg.granularity, seg.span)
    whole = aggregate.segment(seg.text, seg.result.offsets, seg.granularity, pattern=seg.pattern,
                              role_spans=seg.result.role_spans)
    assert len(view.values) == len(whole)
    np.testing.assert_allclose(view.values[seg.segment_index], seg.values, rtol=1e-5, atol=1e-6)
    others = np.setdiff1d(np.arange(len(whole)), seg.segment_index)
    assert np.all(np.nan_to_num(view.values[others]) == 0)  # no value leaks into a segment not measured
    # The colours are the registry's kind of map (signed: diverging), and each colour is the value's.
    assert view.signed is get_any_method(seg.method).signed is True
    s = int(seg.segment_index[int(np.argmin(seg.values))])
    assert view.color(s) == palette.color_for(float(view.values[s]), view.scale)


def test_top_segments_are_the_values_ranked_by_magnitude(computed):
    seg = computed[leave_one_out.NAME, "sentence"]
    view = display.make_view(seg, top=len(seg.values))
    p = seg.result.n_prompt_tokens
    target_segs = {int(i) for i in view.seg.token_segment[p:] if i >= 0}
    want = [(int(seg.segment_index[i]), float(seg.values[i])) for i in np.argsort(-np.abs(seg.values), kind="stable")
            if seg.values[i] != 0 and int(seg.segment_index[i]) not in target_segs]
    assert [(r.seg, pytest.approx(r.value, rel=1e-5)) for r in view.ranked] == want


def test_html_escapes_the_markup_of_segment_texts(computed):
    seg = computed[leave_one_out.NAME, "sentence"]
    page = display.render_html(seg, top=20, title="<i>t</i>")
    assert "<script>" not in page and "<b>two" not in page and "<i>t</i>" not in page
    assert html.escape("<script>alert('x')</script>", quote=True) in page  # the prompt, verbatim but escaped
    assert "&lt;b&gt;two&lt;/b&gt; apples &amp; &quot;pears&quot;." in page  # in the top list, escaped
    # Every prompt character appears once, in order, in the prompt block (tags stripped, entities read).
    block = re.search(r'<div class="ss-text ss-prompt">(.*?)</div>', page, re.S).group(1)
    assert html.unescape(re.sub(r"<[^>]+>", "", block)) == seg.text[:seg.prompt_end]
    # The notebook shows the same fragment.
    assert seg._repr_html_() == display.render_html(seg, document=False)


def test_the_surrogates_fit_and_cost_are_shown_and_a_poor_fit_warns(computed):
    from rich.console import Console

    seg = computed[ablation_surrogate.NAME, "sentence"]
    r2, corr = seg.quality["r2"], seg.quality["correlation"]
    low, high = seg.quality["r2_low"], seg.quality["r2_high"]
    assert low <= r2 <= high
    spread = f" ({low:.2f}\u2013{high:.2f} over random splits)" if high > low else ""
    doomed = dataclasses.replace(seg, warning=ablation.fit_warning(seg.method, seg.quality,
                                                                     AblationConfig(min_r2=2.0)))
    assert doomed.warning  # R^2 is at most 1 < 2: the fit is "poor"
    for s, warned in ((seg, bool(seg.warning)), (doomed, True)):
        page = display.render_html(s)
        console = Console(record=True, width=300)
        console.print(display.SalienceView(s))
        text = console.export_text()
        for out in (html.unescape(page), text):
            assert f"R\u00b2 {r2:.2f}{spread}, correlation {corr:.2f}" in out
            assert f"{s.stats.rows} forward rows" in out
            assert f"saved {100 * s.stats.saved:.0f} %" in out
            assert (s.warning in " ".join(out.split())) if warned else ("⚠" not in out)
    loo = display.render_html(computed[leave_one_out.NAME, "sentence"])
    assert "R\u00b2" not in loo and "forward rows" in loo  # leave one out has no fit


def test_another_granularity_is_refused_with_the_fix(computed):
    seg = computed[leave_one_out.NAME, "sentence"]
    with pytest.raises(ss.SalienceError, match=r"live on sentence segments.*Fix: .*--granularity sentence"):
        display.make_view(seg, granularity="word")
    regex = computed[leave_one_out.NAME, "regex"]
    with pytest.raises(ss.SalienceError, match="live on regex"):
        display.make_view(regex, pattern="[a-z]+")


def test_saved_json_renders_like_the_values_it_came_from(computed, tmp_path):
    """As the CLI saves them: the result with the token values in its spans, the JSON in the meta."""
    loo, sur = computed[leave_one_out.NAME, "sentence"], computed[ablation_surrogate.NAME, "sentence"]
    merged = display.make_view(loo, segments=[sur]).result
    display.to_json(merged, tmp_path / "r.json", {"segments": [loo.to_json(), sur.to_json()]})
    result, meta = display.load(tmp_path / "r.json", with_meta=True)
    for seg in (loo, sur):
        assert display.render_html(result, seg.method, segments=meta["segments"]) == display.render_html(seg)


def test_a_token_result_shows_segment_values_beside_its_gradients(llama, computed):
    seg = computed[leave_one_out.NAME, "sentence"]
    result = ss.compute_span_result(llama, PROMPT, TARGET, methods=("grad_norm",))
    view = display.make_view(result, "grad_norm", "sentence", segments=seg)
    assert view.method == "grad_norm" and view.segment_facts is None and not view.signed
    both = display.make_view(result, segments=seg)  # the segment method by default
    assert both.method == leave_one_out.NAME
    np.testing.assert_allclose(both.values[seg.segment_index], seg.values, rtol=1e-5, atol=1e-6)
    other = ss.compute_span_result(llama, PROMPT + " More.", TARGET, methods=("grad_norm",))
    with pytest.raises(ss.SalienceError, match="another prompt"):
        display.make_view(other, segments=seg)


def test_facts_read_back_from_a_file_are_escaped(computed, tmp_path):
    """A saved file's segment JSON is data: an edited warning or method name with markup stays text."""
    loo = computed[leave_one_out.NAME, "sentence"]
    edited = {**loo.to_json(), "warning": '<img src=x onerror="alert(1)"> & co'}
    result = display.make_view(loo).result
    page = display.render_html(result, segments=[edited])
    assert "<img" not in page and html.escape(edited["warning"], quote=True) in page
