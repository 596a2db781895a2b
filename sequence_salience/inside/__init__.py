"""Inside the model: per-layer predictions, feed-forward sub-updates, value search, interventions.

LM-Debugger (Geva et al., 2022, https://arxiv.org/abs/2204.12130) for every causal LM
whose family is in `architectures.FAMILIES` (Llama/SmolLM2, Mistral, Qwen, Gemma, GPT-2),
at any position, with no external service. Never imports LIT.

    tr = trace(lm, prompt, response, t)                 # one forward pass, no backward
    tr.ranks()                                          # target rank after each layer's FFN
    index = get_value_index(lm)                         # built once, cached on disk
    search_values(lm, index, "Paris").hits              # values that promote " Paris"
    intervene(lm, prompt, [Intervention(20, 512, "off")], response, t)  # before vs. after
    # ... or in steps: intervened_trace, intervened_generation (streamed), response_salience
"""

from sequence_salience.inside.architectures import FAMILIES, Architecture, Layout, resolve_architecture
from sequence_salience.inside.hooks import count_hooks
from sequence_salience.inside.interventions import (
    Intervention,
    InterventionConfig,
    InterventionResult,
    Located,
    ResponseSalience,
    apply_interventions,
    resolve,
    intervene,
    intervened_generation,
    intervened_trace,
    locate,
    response_salience,
)
from sequence_salience.inside.trace import (
    LayerTrace,
    Predictions,
    SubUpdate,
    Trace,
    TraceConfig,
    capture,
    trace,
    trace_ids,
)
from sequence_salience.inside.value_index import (
    SearchResult,
    ValueHit,
    ValueIndex,
    build_value_index,
    get_value_index,
    index_path,
    load_value_index,
    model_identity,
    search_by_projection,
    search_values,
)

__all__ = [
    "FAMILIES",
    "Architecture",
    "Intervention",
    "InterventionConfig",
    "InterventionResult",
    "LayerTrace",
    "Layout",
    "Located",
    "Predictions",
    "ResponseSalience",
    "SearchResult",
    "SubUpdate",
    "Trace",
    "TraceConfig",
    "ValueHit",
    "ValueIndex",
    "apply_interventions",
    "resolve",
    "build_value_index",
    "capture",
    "count_hooks",
    "get_value_index",
    "index_path",
    "intervene",
    "intervened_generation",
    "intervened_trace",
    "load_value_index",
    "locate",
    "model_identity",
    "resolve_architecture",
    "response_salience",
    "search_by_projection",
    "search_values",
    "trace",
    "trace_ids",
]
