/**
 * Work-arounds for LIT 1.3.1's client, one file per LIT element they patch (lit_fixes/; lit_fixes/patch.ts: the one
 * way a class is patched). index.ts applies each once its element class is defined.
 */
import {patchDataTableColumns} from './lit_fixes/data_table.js';
import {patchDatapointEditor} from './lit_fixes/datapoint_editor.js';
import {patchGeneratedTextModule} from './lit_fixes/generated_text.js';
import {patchLayoutSettings} from './lit_fixes/layout_settings.js';
import {patchStatusBar} from './lit_fixes/status_bar.js';
import {patchAppToolbar} from './lit_fixes/toolbar.js';
import {patchTooltip} from './lit_fixes/tooltip.js';

/** Every patch imported above with the tag of the LIT element class it patches (index.ts applies each once it is defined). */
export const LIT_PATCHES: readonly (readonly [tag: string, patch: (cls: unknown) => boolean])[] = [
  ['generated-text-module', patchGeneratedTextModule],
  ['lit-app-statusbar', patchStatusBar],
  ['data-table-module', patchDataTableColumns],
  ['datapoint-editor-module', patchDatapointEditor],
  ['lit-tooltip', patchTooltip],
  ['lit-modules', patchLayoutSettings],
  ['lit-app-toolbar', patchAppToolbar],
];
