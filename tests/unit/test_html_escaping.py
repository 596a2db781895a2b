"""Nothing from a saved result, a resume file, a batch row or a flag runs in an HTML page (issue 33.3).

Markup (`<script>`, `"><img onerror=...>`, `</style>`, quotes, `&`, ...) is fed through every
field of evaluate's resume files (the command reruns over them: no model load), through
render_report's every name and value, and through the text, labels, title and metadata of saved
salience results rendered by the CLI's HTML (`show --html`), compare's HTML and the two-model
comparison. Each page is parsed (html.parser) and must hold no element or attribute the writer
does not write itself: no script / svg / injected element, no `on*` attribute, no image but the
report's own inline PNGs, no comment, and no more end tags of any element than it opened (an
injected `</td></table>` or `</style>` would show there). A resume-file field of the wrong type
(an int that is a string) fails its row with a message naming the line and the field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html.parser
import io
import json
import shutil

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import sequence_salience as ss
from sequence_salience import cli, display
from sequence_salience.compare import compare_results
from sequence_salience.compare.models import ModelComparison
from sequence_salience.evaluate import SummaryConfig, render_report, report, summarize
from tests.unit import tiny_models

PAYLOADS = [
    "<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "'><img src=x onerror=alert(2)>",
    "</style><x-inj onclick=alert(3)>", "</td></tr></table><x-inj>", "</pre></title><x-inj>", "<svg onload=alert(4)>",
    "&lt;script&gt;", "&amp;&", '" onmouseover="alert(5)', "<!-- x -->", "<", ">", '"', "'",
]
# Markup strings: a payload, or a mix of payload pieces and the characters that matter ($ is left out:
# matplotlib reads it as math in the report's plot labels).
MARKUP = st.one_of(st.sampled_from(PAYLOADS),
                   st.lists(st.sampled_from(PAYLOADS + ["a", " ", "&", "=", "/", "x-inj"]), min_size=1, max_size=6)
                   .map("".join))
INJECTED_TAGS = {"script", "svg", "x-inj", "iframe"}
CLOSABLE = {"html", "head", "body", "title", "style", "table", "tr", "td", "th", "pre", "div", "span", "del",
            "ins", "ol", "li", "p", "h1", "h2", "b", "small", "details", "summary"}


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.ends: dict[str, int] = {}
        self.comments: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self.ends[tag] = self.ends.get(tag, 0) + 1

    def handle_comment(self, data):
        self.comments.append(data)


def assert_no_injection(page: str, images: int = 0) -> None:
    """No element, attribute, comment or closing tag in `page` that the writer does not write itself."""
    p = _Elements()
    p.feed(page)
    p.close()
    names = [t for t, _ in p.tags]
    assert not INJECTED_TAGS & set(names), [t for t in names if t in INJECTED_TAGS]
    handlers = [(t, k) for t, a in p.tags for k in a if k.lower().startswith("on")]
    assert not handlers, handlers
    imgs = [a for t, a in p.tags if t == "img"]
    assert len(imgs) == images and all(a.get("src", "").startswith("data:image/png;base64,") for a in imgs)
    assert not p.comments, p.comments
    for tag, n in p.ends.items():
        assert tag in CLOSABLE and n <= names.count(tag), (tag, n, names.count(tag))


# ---------------------------------------------------------------------------------------------------
# evaluate: resume files and the report

ROWS = [
    {"prompt": "The capital of France is Paris. The capital of Italy is Rome.", "target": " Rome."},
    {"prompt": "Alice has three apples and Bob has two apples; together they have five.", "target": " five"},
]
# Line 3: an invalid row whose error message quotes markup (its unknown field's name).
BAD_LINE = json.dumps({"prompt": "x", PAYLOADS[1]: 1})
# Each example runs a command or draws plots: no shrinking (minutes on a shared machine); a failure
# still prints the example that failed.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
FLAGS = ["--granularity", "word", "--steps", "3", "--n-random", "2", "--n-boot", "50", "--reduction",
         "--ig-completeness", "--method", "grad_norm,grad_x_input"]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A real evaluate run over two rows (a tiny model saved in a folder whose name is markup, so the
    --model flag's value reaches the report's settings): (base args, out dir, batch path)."""
    root = tmp_path_factory.mktemp("eval")
    model_dir = tiny_models.save_tiny_llama(root / '"><img src=x onerror=alert(7)>')
    batch = root / "<script>alert(8)<script>.jsonl"  # the report's title is the batch file's name
    batch.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n" + BAD_LINE + "\n", encoding="utf-8")
    out = root / "out"
    args = ["evaluate", "--batch", str(batch), "--out", str(out), "--model", model_dir] + FLAGS
    assert cli.main(args) == cli.EXIT_ROWS_FAILED  # line 3 is invalid
    return args, out, batch


def _rerun(evaluated, tmp_path, edit) -> tuple[int, str, str | None]:
    """Copies the run's folder, edits row 1's saved file with `edit(obj)`, reruns; (exit code, stderr,
    the report or None when none was written)."""
    args, out, _ = evaluated
    fresh = tmp_path / "out"
    if fresh.exists():
        shutil.rmtree(fresh)
    shutil.copytree(out, fresh)
    (fresh / "report.html").unlink()
    path = fresh / "00001.json"
    obj = json.loads(path.read_text(encoding="utf-8"))
    edit(obj)
    path.write_text(json.dumps(obj), encoding="utf-8")
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        code = cli.main(args[:4] + [str(fresh)] + args[5:])
    err = buf.getvalue()
    assert "Loading model" not in err  # every row was already done: the rerun only summarizes
    report = fresh / "report.html"
    return code, err, report.read_text(encoding="utf-8") if report.exists() else None


def _leaves(obj, path=()):
    """(path, is_key) of every value and every mapping key under obj."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,), True
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, path + (i,))
    else:
        yield path, False


def _set(obj, path, value, key: bool):
    *head, last = path
    for p in head:
        obj = obj[p]
    if key:
        obj[value] = obj.pop(last)
    else:
        obj[last] = value


FREE_STRINGS = {"target", "orderings", "row_verdicts", "stopped_by"}  # text fields nothing reads into the page
OPTIONAL = {"orderings", "row_verdicts", "reduction", "ig_completeness"}


def test_a_script_in_a_saved_n_segments_fails_its_row_and_never_reaches_the_report(evaluated, tmp_path):
    """The probe's case: `n_segments` from a resume file was written into report.html as it was."""
    code, err, page = _rerun(evaluated, tmp_path,
                             lambda o: o["evaluation"].__setitem__("n_segments", "<script>alert(1)</script>"))
    assert code == cli.EXIT_ROWS_FAILED
    batch = evaluated[2]
    assert (f"{batch}:1 (00001): its saved result" in err
            and "evaluation.n_segments: expected an integer >= 0, got str '<script>alert(1)</script>'" in err
            and "Fix: delete that file or rerun with --force" in err)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page  # in the failed rows, escaped
    assert_no_injection(page, images=2)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["summary"]["n_rows"] == 1 and [f["line"] for f in summary["failures"]] == [1, 3]


@pytest.fixture
def small_plots(monkeypatch):
    """The report's two figures drawn blank and small. Drawing the real ones takes ~0.9 s of the ~1 s an
    example costs (matplotlib's text layout); what they show is base64 PNG bytes, never text of the page,
    so the page is the same HTML around other image bytes. Markup reaching the plots' real labels is
    drawn in test_render_report_escapes_every_name_and_value (names in every legend and tick label)."""
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    def blank(_summary):
        return Figure(figsize=(0.5, 0.5))

    monkeypatch.setattr(report, "curves_figure", blank)
    monkeypatch.setattr(report, "gaps_figure", blank)


@settings(max_examples=40, deadline=None, phases=NO_SHRINK, suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.parametrize("kind", ["value", "key"])
@given(data=st.data())
def test_markup_in_any_field_of_a_resume_file_never_reaches_the_report_unescaped(evaluated, tmp_path, small_plots,
                                                                                 kind, data):
    """One value replaced by markup (kind "value"), or one key renamed to it ("key"), in row 1's saved file."""
    saved = json.loads((evaluated[1] / "00001.json").read_text(encoding="utf-8"))
    fields = [p for p, is_key in _leaves(saved["evaluation"], ("evaluation",)) if is_key == (kind == "key")]
    path = data.draw(st.sampled_from(fields), label="field")
    payload = data.draw(MARKUP, label="markup")
    original = saved
    for p in path:
        original = original[p]
    code, err, page = _rerun(evaluated, tmp_path, lambda o: _set(o, path, payload, kind == "key"))
    if page is None:  # a well-formed name (e.g. "x-inj") other than row 2's: the rows do not summarize together
        assert code == cli.EXIT_USAGE and "cannot summarize the rows" in err, err
        return
    assert_no_injection(page, images=2)
    failed = ":1 (00001): its saved result" in err
    if failed:  # wrong type, or a name that is not a name: the row fails, naming its line and the field
        assert code == cli.EXIT_ROWS_FAILED and ".".join(map(str, path[:-1])) in err, (path, err)
    else:  # only a text nothing reads into the page, or an optional field renamed away, is reused
        text = kind == "value" and isinstance(original, str) and FREE_STRINGS & set(map(str, path))
        renamed_away = kind == "key" and (FREE_STRINGS & set(map(str, path)) or (len(path) == 2 and path[1] in OPTIONAL))
        assert text or renamed_away, (path, err)


@settings(max_examples=12, deadline=None, phases=NO_SHRINK)
@given(names=st.lists(MARKUP, min_size=5, max_size=5, unique=True), other=st.lists(MARKUP, min_size=6, max_size=6))
def test_render_report_escapes_every_name_and_value(names, other):
    """The library function, given rows whose method, baseline and mode names, ids, segment counts,
    failure messages, settings and title are all markup (nothing validated on the way)."""
    m1, m2, base, mode_a, mode_b = names
    row_id, n_seg, msg, key, value, title = other

    def row(shift: float) -> dict:
        curve = {"logprobs": [0.0, -1.0 - shift, -2.0], "aopc": 1.0 + shift}
        return {"n_removed": [0, 1, 2], "original_logprob": 0.0, "empty_logprob": -2.0, "baselines": [base],
                "n_segments": n_seg,
                "curves": {md: {m1: curve, m2: curve, base: curve} for md in (mode_a, mode_b)},
                "gaps": {md: {m1: {base: shift}, m2: {base: -shift}} for md in (mode_a, mode_b)}}

    evaluations = [row(0.5), row(1.5)]
    summary = summarize(evaluations, SummaryConfig(n_boot=20))
    rows = [{"id": row_id, "line": n_seg, "evaluation": e} for e in evaluations]
    page = render_report(summary, rows, [(msg, msg)], title=title, settings={key: value, "model": value})
    assert_no_injection(page, images=2)
    assert page.count("<h1>") == 1


# ---------------------------------------------------------------------------------------------------
# Saved salience results: the CLI's HTML, compare's HTML, the two-model comparison

@pytest.fixture(scope="module")
def tiny_lm() -> ss.LanguageModel:
    return tiny_models.wrap(tiny_models.tiny_llama(), "llama")


# Prompt and response texts: up to two payloads or words each (the tiny model's context is 128 bytes).
TEXT = st.lists(st.sampled_from(PAYLOADS + ["Paris", " is", ".", "\n"]), min_size=1, max_size=2).map(
    "".join).filter(lambda s: s.strip() != "")


@settings(max_examples=15, deadline=None, phases=NO_SHRINK, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=TEXT, target=TEXT, meta=MARKUP, title=MARKUP,
       granularity=st.sampled_from(["token", "word", "sentence", "line"]))
def test_a_saved_result_with_markup_everywhere_renders_escaped(tiny_lm, tmp_path, prompt, target, meta, title,
                                                                granularity):
    """Prompt and response text (so tokens, segments and the top list), metadata and title of a result
    saved to JSON and shown by the CLI (`show FILE --html`) and by display.render_html."""
    result = ss.compute_salience(tiny_lm, prompt, " " + target, methods=("grad_norm", "grad_x_input"))
    path = tmp_path / "r.json"
    display.to_json(result, path, meta={meta: meta, "model": meta})
    out = tmp_path / "r.html"
    assert cli.main(["show", str(path), "--html", str(out), "--granularity", granularity]) == cli.EXIT_OK
    assert_no_injection(out.read_text(encoding="utf-8"))
    loaded = display.load(path)
    assert_no_injection(display.render_html(loaded, "grad_x_input", granularity, title=title))
    assert_no_injection(display.render_html(loaded, "grad_norm", granularity, title=title, document=False))


@settings(max_examples=10, deadline=None, phases=NO_SHRINK, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompts=st.lists(TEXT, min_size=2, max_size=2), targets=st.lists(TEXT, min_size=2, max_size=2),
       labels=st.lists(MARKUP, min_size=2, max_size=2), title=MARKUP)
def test_comparisons_with_markup_everywhere_render_escaped(tiny_lm, prompts, targets, labels, title):
    """compare's HTML (texts, labels, title, the cross log-p table's tokens) and the two-model view."""
    a = ss.compute_salience(tiny_lm, prompts[0], " " + targets[0], methods=("grad_x_input",))
    b = ss.compute_salience(tiny_lm, prompts[1], " " + targets[1], methods=("grad_x_input",))
    cmp = compare_results(a, b, labels=tuple(labels))
    assert_no_injection(cmp.html(document=True, title=title))
    cross = ss.compare(tiny_lm, prompts[0], prompts[1], response_a=" " + targets[0], response_b=" " + targets[1],
                       chat=False, labels=tuple(labels)).cross
    with_cross = dataclasses.replace(cmp, cross=cross)
    assert_no_injection(with_cross.html(document=True, title=title))
    two = ModelComparison(comparison=with_cross, cross_b=cross, same_tokenizer=True)
    assert_no_injection(two.html(document=True, title=title))
