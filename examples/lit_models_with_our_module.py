"""Our salience module over a LIT user's own prompt-debugging models (no Sequence Salience wrappers).

    python examples/lit_models_with_our_module.py [--model_path FOLDER] [--port 5432] [--max_length 48]

The models are LIT's own, built as `lit_nlp.examples.prompt_debugging` builds them: an
`HFGenerativeModel`, and an `HFSalienceModel` and `HFTokenizerModel` sharing its weights, named
`lit_lm`, `_lit_lm_salience`, `_lit_lm_tokenizer`. `--model_path` is any Hugging Face causal-LM
folder; the default is the embedded SmolLM2-135M-Instruct, converted once to a folder in the
cache (offline). Our salience module finds their `grad_l2` / `grad_dot_input` fields, paints the
whole response and each clicked span (one salience request per click, as LIT's own module does)
and says which extras need our wrappers (README, "Use in your own LIT server").

Two defects of lit-nlp 1.3.1's `transformers_lms` are worked around here, nothing else changed:
* `HFBaseModel.from_loaded` reads `model.framework`, which transformers 5 removed: it is set to "pt";
* `HFGenerativeModel` builds `ntok_in` as `(batch_size, ntok_in)`, so a batch of one (the selected
  datapoint) fails with "Batch length of predictions should be same": it is made one per example.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
from lit_nlp import dev_server
from lit_nlp.api import dataset as lit_dataset
from lit_nlp.api import layout
from lit_nlp.api import types as lit_types
from lit_nlp.examples.prompt_debugging import transformers_lms

from lit_app import plugin

LitModuleName = layout.LitModuleName


class HFGenerativeModel(transformers_lms.HFGenerativeModel):
    """LIT's generation wrapper with `ntok_in` one entry per example (lit-nlp 1.3.1 fails on one input)."""

    def _get_batched_outputs(self, inputs):
        out = dict(super()._get_batched_outputs(inputs))
        batch, ntok_in = (int(x) for x in out["ntok_in"])  # LIT builds np.array((batch_size, ntok_in))
        out["ntok_in"] = np.full((batch,), ntok_in)
        return out


def lit_model_group(name: str, path: str, max_length: int) -> dict:
    """`{name, _name_salience, _name_tokenizer}` as transformers_lms.initialize_model_group_for_salience."""
    generation = HFGenerativeModel(model_name_or_path=path, max_length=max_length, framework="torch", batch_size=1)
    if not hasattr(generation.model, "framework"):
        generation.model.framework = "pt"  # transformers 5 dropped the attribute from_loaded reads
    return {
        name: generation,
        f"_{name}_salience": transformers_lms.HFSalienceModel.from_loaded(generation),
        f"_{name}_tokenizer": transformers_lms.HFTokenizerModel.from_loaded(generation),
    }


class Completions(lit_dataset.Dataset):
    """Raw-text prompts (LIT's prompt-debugging models apply no chat template)."""

    def __init__(self):
        super().__init__()
        self._examples = [
            {"prompt": "The capital of France is", "target": ""},
            {"prompt": "Water boils at a temperature of", "target": ""},
        ]

    def spec(self) -> lit_types.Spec:
        return {"prompt": lit_types.TextSegment(), "target": lit_types.TextSegment(required=False, default="")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_path", default=None, help="HF causal-LM folder (default: the embedded model, converted)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5432)
    p.add_argument("--max_length", type=int, default=48, help="LIT's limit: prompt + generated tokens")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = args.model_path
    if path is None:
        from sequence_salience import model as model_lib  # the embedded GGUF, as an HF folder in the cache

        path = str(model_lib.convert_gguf(model_lib.default_gguf_path()))
    models = lit_model_group("lit_lm", path, args.max_length)
    mine = layout.LitCanonicalLayout(
        left={"Prompts": [LitModuleName.DataTableModule], "Generated": [LitModuleName.GeneratedTextModule]},
        upper={"Salience": [plugin.SALIENCE_MODULE]},
        lower={"Inside the model": [plugin.INSIDE_MODULE], "Test this explanation": [plugin.EXPLAIN_MODULE]},
        layoutSettings=layout.LayoutSettings(leftWidth=30, mainHeight=60),
        description="LIT's prompt-debugging models with Sequence Salience's module.",
    )
    dev_server.Server(models, {"completions": Completions()}, layouts={"lit_models": mine},
                      default_layout="lit_models", client_root=plugin.client_root(),
                      server_type=plugin.server_type(), host=args.host, port=args.port).serve()


if __name__ == "__main__":
    main()
