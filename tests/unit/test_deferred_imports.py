"""lit_app/__init__.py's deferred imports: LIT's SHAP, sacrebleu and ROUGE dependencies are not imported when the
server's modules are, and a LIT component that uses one gets the real module (in fresh interpreters, not
the test process, which may have imported them already: one for the server's import and a component's use, one
for the threads)."""

import subprocess
import sys
import textwrap

import pytest

from tests.server_process import REPO


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def server_imported() -> list[str]:
    """One fresh interpreter for the two tests below (each import of the server is seconds of CPU): its first
    output line, right after `import lit_app.server`, says which deferred modules are stand-ins and which of their
    heavy imports are real; the second, what a LIT component that uses them got."""
    out = _run("""
        import importlib, sys
        import lit_app.server
        from lit_app import DEFERRED
        real = [m for m in ("shap", "numba", "IPython", "matplotlib", "nltk", "sacrebleu", "rouge_score.rouge_scorer")
                if m in sys.modules and type(sys.modules[m]).__name__ == "module"]
        print(sorted(DEFERRED), real)
        from lit_nlp.components import metrics, shap_explainer
        assert type(sys.modules["shap"]).__name__ == "_Deferred"
        explainer = shap_explainer.shap.KernelExplainer  # the first read imports SHAP
        assert sys.modules["shap"] is importlib.import_module("shap") and type(sys.modules["shap"]).__name__ == "module"
        assert explainer is sys.modules["shap"].KernelExplainer
        print(metrics.rouge_scorer.RougeScorer(["rouge1"]).score("the cat sat", "the cat sat")["rouge1"].fmeasure,
              round(metrics.sacrebleu.corpus_bleu(["a b c d e"], [["a b c d e"]]).score, 6),
              metrics.rouge_scorer.RougeScorer is sys.modules["rouge_score.rouge_scorer"].RougeScorer,
              type(sys.modules["rouge_score.rouge_scorer"]).__name__, type(sys.modules["sacrebleu"]).__name__)
    """).splitlines()
    assert len(out) == 2, out
    return out


def test_the_servers_modules_import_none_of_the_deferred_modules(server_imported):
    out = server_imported[0]
    assert out.split() == ["['rouge_score.rouge_scorer',", "'sacrebleu',", "'shap']", "[]"], out


def test_a_component_using_a_deferred_module_gets_the_real_one(server_imported):
    out = server_imported[1]
    # ROUGE-1 and BLEU of a text against itself: 1 and 100 (the metrics' definitions), from the real modules
    assert out.split() == ["1.0", "100.0", "True", "module", "module"], out


def test_threads_reading_a_stand_in_at_once_all_get_the_real_module():
    out = _run("""
        import sys, threading
        from lit_app import defer_import
        defer_import("colorsys")  # a small stdlib module nothing here imports
        stand_in = sys.modules["colorsys"]
        got = []
        threads = [threading.Thread(target=lambda: got.append(stand_in.rgb_to_hsv(1.0, 0.0, 0.0))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        import colorsys
        print(type(stand_in).__name__, type(colorsys).__name__, len(got), set(got))
    """)
    assert out.split() == ["_Deferred", "module", "8", "{(0.0,", "1.0,", "1.0)}"], out
