"""LIT layouts: datapoint editor, data table, generated text and our salience module."""

from lit_nlp.api import layout

_modules = layout.LitModuleName

# Custom-element tag of the Sequence Salience module defined by our bundle
# (frontend/src, built into frontend/dist/sequence_salience.js).
# NOTE: LIT 1.3.1's main.js already registers a built-in element with the tag
# "sequence-salience-module" (its own SequenceSalienceModule), and a tag can be
# defined only once per page. If the bundle registers its module under another
# tag, change this constant to match it.
SALIENCE_MODULE_TAG = "sequence-salience-module"

SALIENCE_LAYOUT_NAME = "sequence_salience"
SIMPLE_LAYOUT_NAME = "sequence_salience_simple"

SALIENCE_LAYOUT = layout.LitCanonicalLayout(
    left={
        "Prompts": [_modules.DataTableModule],
        "Editor": [_modules.SingleDatapointEditorModule],
    },
    upper={
        "Sequence Salience": [layout.ModuleConfig(SALIENCE_MODULE_TAG)],
    },
    lower={
        "Generated Text": [_modules.GeneratedTextModule],
    },
    layoutSettings=layout.LayoutSettings(leftWidth=35, mainHeight=70),
    description=(
        "Prompt debugging: pick or edit a prompt on the left, click part of the"
        " output to see which parts of the prompt drove it."
    ),
)

SIMPLE_LAYOUT = layout.LitCanonicalLayout(
    upper={
        "Prompts": [_modules.SimpleDataTableModule],
        "Editor": [_modules.SimpleDatapointEditorModule],
    },
    lower={
        "Sequence Salience": [layout.ModuleConfig(SALIENCE_MODULE_TAG)],
    },
    layoutSettings=layout.LayoutSettings(hideToolbar=True, mainHeight=35, centerPage=True),
    description="Simplified top/bottom layout for prompt debugging.",
)

LAYOUTS: layout.LitComponentLayouts = {
    SALIENCE_LAYOUT_NAME: SALIENCE_LAYOUT,
    SIMPLE_LAYOUT_NAME: SIMPLE_LAYOUT,
}
DEFAULT_LAYOUT = SALIENCE_LAYOUT_NAME
