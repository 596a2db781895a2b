"""Sequence Salience: input salience for LLM prompts, for every generated token at once.

The core library; it never imports LIT. See docs/architecture.md.
"""

from sequence_salience import display  # noqa: F401  (registers SalienceResult's renderer)
from sequence_salience.compare import ModelComparison, SalienceComparison, compare, compare_models, compare_results
from sequence_salience.errors import ComputationCancelled, PatternBusy, SalienceError
from sequence_salience.methods import get_method, list_methods, registry_json
from sequence_salience.methods.base import SalienceConfig
from sequence_salience.model import (
    DEFAULT_MODEL,
    Generation,
    GenerationConfig,
    LanguageModel,
    from_modules,
    load_model,
)
from sequence_salience.result import SalienceResult
from sequence_salience.salience import (
    compute_salience,
    compute_salience_batch,
    compute_span_result,
    compute_span_salience,
)
from sequence_salience.text import ChatPrompt, TokenizedText

__all__ = [
    "DEFAULT_MODEL",
    "ChatPrompt",
    "ComputationCancelled",
    "Generation",
    "GenerationConfig",
    "LanguageModel",
    "SalienceConfig",
    "PatternBusy",
    "SalienceError",
    "ModelComparison",
    "SalienceComparison",
    "SalienceResult",
    "TokenizedText",
    "compare",
    "compare_models",
    "compare_results",
    "compute_salience",
    "compute_salience_batch",
    "compute_span_result",
    "compute_span_salience",
    "from_modules",
    "get_method",
    "list_methods",
    "load_model",
    "registry_json",
]
