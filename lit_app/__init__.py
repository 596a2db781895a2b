"""LIT front end for sequence_salience: model wrappers, datasets, layouts, client root, server.

Importing it defers three of LIT's component dependencies (`DEFERRED`) until a component first uses one:
`lit_nlp.app` imports every LIT component at module level, and with them SHAP (numba, IPython, matplotlib), NLTK
(ROUGE) and sacrebleu, which only LIT's Tabular SHAP interpreter and its BLEU / ROUGE metrics call. Each becomes a
stand-in module until its first attribute is read; that read imports the real module (once, under a lock) and
answers from it, so a component that runs gets what it would have got. A server's start imports 1.2 s less of CPU
(4.2 -> 3.0 s, `import lit_app.server` alone; docs/benchmarks.md, "Session 36 (h5)").

It also turns MKL's per-thread buffer pools off before anything imports torch (lit_app/memory.py
`no_mkl_buffer_pools`): each thread that ran a model pass kept ~20 MB of them; and it fixes glibc's mmap and
trim thresholds (`fixed_malloc_thresholds`): a thread arena kept up to 64 MB of freed pass memory.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

from lit_app import memory

memory.no_mkl_buffer_pools()  # before torch is imported: MKL reads it when it loads
memory.fixed_malloc_thresholds()  # before the model's load would raise them

# Imported by lit_nlp/components/shap_explainer.py (`import shap`), metrics.py (`import sacrebleu`,
# `from rouge_score import rouge_scorer`); used only inside the components' calls.
DEFERRED = ("shap", "sacrebleu", "rouge_score.rouge_scorer")
_LOCK = threading.RLock()


class _Deferred(types.ModuleType):
    """Stands in sys.modules for a module not yet imported; the first attribute it lacks imports the real one."""

    def __getattr__(self, attr: str):
        with _LOCK:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
                try:
                    real = importlib.import_module(self.__name__)
                except BaseException:
                    sys.modules.setdefault(self.__name__, self)
                    raise
                self.__dict__.update(real.__dict__)
        real = sys.modules.get(self.__name__, self)
        return self.__dict__[attr] if attr in self.__dict__ else getattr(real, attr)


def defer_import(name: str) -> None:
    """Puts a stand-in for `name` in sys.modules unless it is imported already or not installed (LIT's own import
    then fails as it would have). A dotted name's package is imported (rouge_score's __init__ is empty)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return
    module = _Deferred(name)
    module.__spec__, module.__file__, module.__loader__ = spec, spec.origin, spec.loader
    sys.modules[name] = module


for _name in DEFERRED:
    defer_import(_name)
