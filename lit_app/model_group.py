"""The LIT model map of one loaded model: generation, salience, tokenizer and compare wrappers over one SharedLM.

`make_models` names them after LIT's convention: `name`, `_name_salience`,
`_name_tokenizer` (see `fields.model_group_names`), and `_name_compare` (lit_app/compare.py). The server adds the inside-the-model
wrappers (lit_app/inside.py, `with_inside`) and the explain wrapper (lit_app/explain.py).
"""

from __future__ import annotations

from lit_nlp.api import model as lit_model

from lit_app import fields
from lit_app.compare import CompareModel
from lit_app.generation import GenerationModel
from lit_app.salience import SalienceModel
from lit_app.shared_model import SharedLM
from lit_app.tokenizer import TokenizerModel


def make_models(shared: SharedLM, name: str) -> dict[str, lit_model.Model]:
    """The LIT model map for one loaded model; the generation model first (LIT's default)."""
    gen_name, salience_name, tokenizer_name = fields.model_group_names(name)
    generation = GenerationModel(shared)
    return {
        gen_name: generation,
        salience_name: SalienceModel.from_loaded(generation),
        tokenizer_name: TokenizerModel.from_loaded(generation),
        fields.compare_model_name(name): CompareModel.from_loaded(generation),
    }
