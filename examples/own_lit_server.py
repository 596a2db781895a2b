"""Sequence Salience inside your own LIT server: LIT's dev_server, your dataset, a layout of your own.

    python examples/own_lit_server.py [--model default] [--port 5432] [--host 127.0.0.1]
                                      [--max_new_tokens 64] [--token T | --no_token]

With the package installed (`pip install sequence-salience-<version>-py3-none-any.whl`, README
"Install") this runs from anywhere; in a checkout run it from the repository root. It prints
"Sequence Salience is ready: http://127.0.0.1:5432/?token=..." once it serves: open that URL.

What it shows (README, "Use in your own LIT server"):
1. a dataset class of your own (any `lit_nlp.api.dataset.Dataset` with a `prompt` TextSegment);
2. our LIT wrappers over a loaded model (`plugin.make_models`), merged into your model map;
3. a layout mixing our three modules with LIT's data table, datapoint editor, generated text and
   LIT's own Sequence Salience module (which reads our salience model as it reads LIT's);
4. LIT's own `lit_nlp.dev_server.Server`, served through our request rules (`plugin.server_type()`),
   with our client root (LIT's UI + our bundle + local fonts).
"""

from __future__ import annotations

import argparse
import logging

from lit_nlp import dev_server
from lit_nlp.api import dataset as lit_dataset
from lit_nlp.api import layout
from lit_nlp.api import types as lit_types

import sequence_salience as ss
from lit_app import plugin

LitModuleName = layout.LitModuleName


class TravelQuestions(lit_dataset.Dataset):
    """A user's own dataset: a prompt, an optional reference answer and a topic label."""

    EXAMPLES = (
        {"topic": "capitals", "prompt": "What is the capital of France?", "target": ""},
        {"topic": "capitals", "prompt": "Which city is the capital of Japan? Answer in one word.", "target": ""},
        {"topic": "packing", "prompt": "List three things to pack for a rainy weekend in London.", "target": ""},
    )

    def __init__(self):
        super().__init__()
        self._examples = [dict(ex) for ex in self.EXAMPLES]

    def spec(self) -> lit_types.Spec:
        return {
            "topic": lit_types.CategoryLabel(),
            "prompt": lit_types.TextSegment(),
            "target": lit_types.TextSegment(required=False, default=""),
        }


def my_layout() -> layout.LitCanonicalLayout:
    """LIT's data table, editor and generated text on the left; our modules on the right."""
    return layout.LitCanonicalLayout(
        left={
            "Questions": [LitModuleName.DataTableModule],
            "Editor": [LitModuleName.SingleDatapointEditorModule],
            "Generated": [LitModuleName.GeneratedTextModule],
        },
        upper={
            "Which words drove the answer": [plugin.SALIENCE_MODULE],
            # LIT's built-in module reads our salience model too (LIT's prompt-debugging field names).
            "LIT's Sequence Salience": [LitModuleName.SequenceSalienceModule],
        },
        lower={"Inside the model": [plugin.INSIDE_MODULE], "Test this explanation": [plugin.EXPLAIN_MODULE]},
        layoutSettings=layout.LayoutSettings(leftWidth=35, mainHeight=58),
        description="My travel questions, with Sequence Salience's modules beside LIT's.",
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default", help='"default" (embedded SmolLM2), an HF folder or id, a .gguf')
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5432)
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--token", default=None, help="The token requests must carry (default: a fresh one).")
    p.add_argument("--no_token", action="store_true", help="No token (loopback only; any local user can connect).")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    lm = ss.load_model(args.model)
    models = plugin.make_models(lm, "travel_lm", max_new_tokens=args.max_new_tokens)
    datasets = {"travel": TravelQuestions()}
    layouts = {"travel": my_layout(), **plugin.layouts()}

    server = dev_server.Server(
        models, datasets,
        layouts=layouts, default_layout="travel",
        client_root=plugin.client_root(),          # LIT's UI + our bundle, fonts and request guard
        page_title="Travel questions",
        server_type=plugin.server_type(),          # LIT's app behind our request rules
        host=args.host, port=args.port, token=args.token, no_token=args.no_token,
    )
    server.serve()


if __name__ == "__main__":
    main()
