"""The LIT model map of one loaded model: the one place that builds it (server, plugin, notebook, tests).

`lit_models(shared, name)` wraps one SharedLM and names the wrappers after LIT's convention:
`name` (generation), `_name_salience`, `_name_tokenizer` (see `fields.model_group_names`),
`_name_compare` (lit_app/wrappers/compare.py), the three inside-the-model wrappers (lit_app/wrappers/inside.py,
`model_names`) and `_name_explain` (lit_app/wrappers/explain.py).
"""

from __future__ import annotations

from lit_nlp.api import model as lit_model

from lit_app.schema import fields
from lit_app.wrappers import inside as inside_lib
from lit_app.wrappers.compare import CompareModel
from lit_app.wrappers.explain import ExplainModel, explain_model_name
from lit_app.wrappers.generation import GenerationModel
from lit_app.wrappers.salience import SalienceModel
from lit_app.wrappers.share import ShareModel
from lit_app.model.shared_model import SharedLM
from lit_app.wrappers.tokenizer import TokenizerModel


def lit_models(shared: SharedLM, name: str, *, inside: bool = True,
               explain_tests: bool = True) -> dict[str, lit_model.Model]:
    """The LIT model map for one loaded model; the generation model first (LIT's default).

    inside / explain_tests: False leaves out the inside-the-model or test-this-explanation
    wrappers (their modules then say the model does not support them).
    """
    gen_name, salience_name, tokenizer_name = fields.model_group_names(name)
    generation = GenerationModel(shared)
    group: dict[str, lit_model.Model] = {
        gen_name: generation,
        salience_name: SalienceModel.from_loaded(generation),
        tokenizer_name: TokenizerModel.from_loaded(generation),
        fields.compare_model_name(name): CompareModel.from_loaded(generation),
        fields.share_model_name(name): ShareModel.from_loaded(generation),
    }
    if inside:
        group.update(inside_lib.make_inside_models(shared, name))
    if explain_tests:
        group[explain_model_name(gen_name)] = ExplainModel(shared)
    return group
