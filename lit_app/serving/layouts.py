"""LIT layouts: datapoint editor, data table, generated text and our salience module."""

from lit_nlp.api import layout

_modules = layout.LitModuleName

# Custom-element tag of the Sequence Salience module defined by our bundle
# (frontend/src/salience_module.ts `TAG`, built into frontend/dist/sequence_salience.js).
# Not "sequence-salience-module": LIT 1.3.1's main.js already registers that
# tag for its own module, and a tag can be defined only once per page.
SALIENCE_MODULE_TAG = "prompt-salience-module"
# "Inside the model" (frontend/src/inside/module.ts `INSIDE_TAG`), a tab beside it.
INSIDE_MODULE_TAG = "inside-model-module"
# "Test this explanation" (frontend/src/explain/module.ts `EXPLAIN_TAG`), a tab beside it.
EXPLAIN_MODULE_TAG = "explain-test-module"
# Two models selected in LIT's model selector are compared inside the salience module (its "Compare
# models" section, frontend/src/salience/compare_models/room.ts), not in a module of their own.

SALIENCE_LAYOUT_NAME = "sequence_salience"
# The same modules with Inside / Test below the salience module (both in view at once; needs a
# tall window: LIT gives the lower group at least ~220 px, so at 1280x720 the salience module
# keeps about half the height).
SPLIT_LAYOUT_NAME = "sequence_salience_split"
SIMPLE_LAYOUT_NAME = "sequence_salience_simple"
DEFAULT_LAYOUT = SALIENCE_LAYOUT_NAME

# Left column (data table, editor, generated text) in percent of the page width.
LEFT_WIDTH = 30


def _left():
    return {
        "Prompts": [_modules.DataTableModule],
        "Editor": [_modules.SingleDatapointEditorModule],
        # LIT 1.3.1's GeneratedTextModule fills its results in place after
        # its first render and does not re-render; our bundle patches it
        # (frontend/src/lit_fixes/generated_text.ts) so it follows the selection.
        "Generated Text": [_modules.GeneratedTextModule],
    }


def make_layouts(with_salience_module: bool = True) -> layout.LitComponentLayouts:
    """Our layouts; the first is the default.

    The default gives the salience module the whole main area: "Inside the model" and "Test this
    explanation" are tabs beside it (they follow the target chosen in the salience module, and
    compute only once their tab is open), so they never shrink it. LIT's lower group cannot
    be collapsed below ~220 px, which at 1280x720 left the prompt ~3 lines; the split layout keeps
    that arrangement for tall windows. LIT 1.3.1 ignores `layoutSettings` on the first load; our
    bundle applies them (frontend/src/lit_fixes/layout_settings.ts, patchLayoutSettings).

    Args:
      with_salience_module: False when the bundle is not in the client root:
        LIT's client rejects a layout naming an undefined element ("Malformed
        layout"), so the layouts then show LIT's built-in modules only.
    """
    generated = {"Generated Text": [_modules.GeneratedTextModule]}
    if not with_salience_module:
        main, extras = {}, {}
    else:
        main = {"Sequence Salience": [layout.ModuleConfig(SALIENCE_MODULE_TAG)]}
        extras = {
            "Inside the model": [layout.ModuleConfig(INSIDE_MODULE_TAG)],
            "Test this explanation": [layout.ModuleConfig(EXPLAIN_MODULE_TAG)],
        }
    description = (
        "Prompt debugging: pick or edit a prompt on the left, click part of"
        " the output to see which parts of the prompt drove it."
    )
    return {
        SALIENCE_LAYOUT_NAME: layout.LitCanonicalLayout(
            left=_left(),
            upper={**main, **extras} or generated,
            layoutSettings=layout.LayoutSettings(leftWidth=LEFT_WIDTH, mainHeight=100),
            description=description + " Inside the model and Test this explanation are tabs beside the"
            " salience module.",
        ),
        SPLIT_LAYOUT_NAME: layout.LitCanonicalLayout(
            left=_left(),
            upper=main or generated,
            lower=extras,
            layoutSettings=layout.LayoutSettings(leftWidth=LEFT_WIDTH, mainHeight=60 if extras else 100),
            description=description + " Inside the model and Test this explanation below it (for tall"
            " windows).",
        ),
        SIMPLE_LAYOUT_NAME: layout.LitCanonicalLayout(
            upper={
                "Prompts": [_modules.SimpleDataTableModule],
                "Editor": [_modules.SimpleDatapointEditorModule],
            },
            lower=main or generated,
            layoutSettings=layout.LayoutSettings(hideToolbar=True, mainHeight=35, centerPage=True),
            description="Simplified top/bottom layout for prompt debugging.",
        ),
    }

