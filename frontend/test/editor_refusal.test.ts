// The datapoint editor refuses, before "Add", a row the server would refuse (issue 35 point 1): an empty or
// whitespace-only prompt, or prompt + system + target over the server's published --max_prompt_chars.
import {describe, expect, it} from 'vitest';

import {editorRefusal, patchDatapointEditor, withoutCopiedCase} from '../src/lit_fixes/datapoint_editor.js';
import {CASE_FIELD, PROMPT_FIELD} from '../src/shared/fields.js';

const LIMITS = {max_prompt_chars: 32_000};

describe('editorRefusal', () => {
  it.each([
    [{prompt: ''}, 'The prompt is empty: type a prompt to add this row.'],
    [{prompt: '   \n\t '}, 'The prompt is only spaces or line breaks: type a prompt to add this row.'],
    [{prompt: 'x'.repeat(40_000), system: 'y'.repeat(296)},
     'prompt + system + target is 40,296 characters; this server accepts up to 32,000 (--max_prompt_chars).' +
     ' Shorten the prompt to add this row.'],
  ])('%#: refuses in words', (data, message) => {
    expect(editorRefusal(data, LIMITS)).toEqual({field: 'prompt', message});
  });

  it.each([
    [{prompt: 'What is the capital of France?'}, LIMITS],
    [{prompt: 'x'.repeat(31_990), target: 'y'.repeat(10)}, LIMITS],  // exactly the limit
    [{prompt: 'x'.repeat(40_000)}, undefined],  // an older server publishes no limit: it refuses itself
  ])('%#: accepts', (data, limits) => {
    expect(editorRefusal(data, limits)).toBeNull();
  });
});

describe('patchDatapointEditor', () => {
  class Editor {
    editedData = {data: {prompt: '  '} as Record<string, unknown>};
    appState = {metadata: {requestLimits: {max_prompt_chars: 10}}};
    shadowRoot = null;
    get missingFields(): string[] {  // LIT's: required fields with a falsy value
      return ['prompt'].filter((f) => !this.editedData.data[f]);
    }
  }

  it('names the prompt as missing while the row would be refused (which disables "Add")', () => {
    expect(new Editor().missingFields).toEqual([]);  // LIT's own check lets whitespace through
    expect(patchDatapointEditor(Editor)).toBe(true);
    expect(patchDatapointEditor(Editor)).toBe(false);  // once
    const e = new Editor();
    expect(e.missingFields).toEqual(['prompt']);
    e.editedData = {data: {prompt: 'Hello'}};
    expect(e.missingFields).toEqual([]);
    e.editedData = {data: {prompt: 'Hello there, world'}};  // 18 > 10 characters
    expect(e.missingFields).toEqual(['prompt']);
    e.editedData = {data: {prompt: ''}};
    expect(e.missingFields).toEqual(['prompt']);  // not named twice
  });
});

describe('withoutCopiedCase (issue 45: a new row does not carry the selected row\'s case)', () => {
  const row = {id: 'a', data: {[CASE_FIELD]: 'simple question', [PROMPT_FIELD]: 'What is the capital of Italy?'}};

  it('empties the copied case once another field is edited', () => {
    expect(withoutCopiedCase(row, {[PROMPT_FIELD]: 'What is the capital of Italy?'}).data[CASE_FIELD]).toBe('');
    expect(row.data[CASE_FIELD]).toBe('simple question');  // the selected row itself is not changed
  });

  it('keeps a case the user typed, and the row as selected while nothing is edited', () => {
    const typed = {...row, data: {...row.data, [CASE_FIELD]: 'my case'}};
    expect(withoutCopiedCase(typed, {[CASE_FIELD]: 'my case', [PROMPT_FIELD]: 'x'}).data[CASE_FIELD]).toBe('my case');
    expect(withoutCopiedCase(row, {})).toBe(row);
    expect(withoutCopiedCase(row, undefined)).toBe(row);
  });
});
