"""LIT layouts: datapoint editor, data table, generated text and our salience module."""

from lit_nlp.api import layout

_modules = layout.LitModuleName

# Custom-element tag of the Sequence Salience module defined by our bundle
# (frontend/src/element.ts `TAG`, built into frontend/dist/sequence_salience.js).
# Not "sequence-salience-module": LIT 1.3.1's main.js already registers that
# tag for its own module, and a tag can be defined only once per page.
SALIENCE_MODULE_TAG = "prompt-salience-module"
# "Inside the model" (frontend/src/inside/module.ts `INSIDE_TAG`), shown below it.
INSIDE_MODULE_TAG = "inside-model-module"
# "Test this explanation" (frontend/src/explain/module.ts `EXPLAIN_TAG`), a tab beside it.
EXPLAIN_MODULE_TAG = "explain-test-module"

SALIENCE_LAYOUT_NAME = "sequence_salience"
SIMPLE_LAYOUT_NAME = "sequence_salience_simple"
DEFAULT_LAYOUT = SALIENCE_LAYOUT_NAME


def make_layouts(with_salience_module: bool = True) -> layout.LitComponentLayouts:
    """Our layouts; the first is the default.

    Args:
      with_salience_module: False when the bundle is not in the client root:
        LIT's client rejects a layout naming an undefined element ("Malformed
        layout"), so the layouts then show LIT's built-in modules only.
    """
    salience = [layout.ModuleConfig(SALIENCE_MODULE_TAG)] if with_salience_module else []
    main = {"Sequence Salience": salience} if salience else {}
    # Below the salience module, full width: it follows the token clicked there.
    inside = {"Inside the model": [layout.ModuleConfig(INSIDE_MODULE_TAG)]} if with_salience_module else {}
    if with_salience_module:
        inside["Test this explanation"] = [layout.ModuleConfig(EXPLAIN_MODULE_TAG)]
    return {
        SALIENCE_LAYOUT_NAME: layout.LitCanonicalLayout(
            left={
                "Prompts": [_modules.DataTableModule],
                "Editor": [_modules.SingleDatapointEditorModule],
                # LIT 1.3.1's GeneratedTextModule fills its results in place after
                # its first render and does not re-render; our bundle patches it
                # (frontend/src/lit_fixes.ts) so it follows the selection.
                "Generated Text": [_modules.GeneratedTextModule],
            },
            upper=main or {"Generated Text": [_modules.GeneratedTextModule]},
            lower=inside,
            layoutSettings=layout.LayoutSettings(leftWidth=35, mainHeight=58 if inside else 90),
            description=(
                "Prompt debugging: pick or edit a prompt on the left, click part of"
                " the output to see which parts of the prompt drove it."
            ),
        ),
        SIMPLE_LAYOUT_NAME: layout.LitCanonicalLayout(
            upper={
                "Prompts": [_modules.SimpleDataTableModule],
                "Editor": [_modules.SimpleDatapointEditorModule],
            },
            lower=main or {"Generated Text": [_modules.GeneratedTextModule]},
            layoutSettings=layout.LayoutSettings(hideToolbar=True, mainHeight=35, centerPage=True),
            description="Simplified top/bottom layout for prompt debugging.",
        ),
    }


LAYOUTS = make_layouts()
