// Escape that reached the window resets the target (issue 45: once Tab had left the response, Escape did nothing),
// except where Escape belongs to the focused control or was already handled.
import {describe, expect, it} from 'vitest';

import {isPageEscape} from '../src/salience/target_input.js';

const key = (over: Partial<KeyboardEvent> = {}) =>
  ({key: 'Escape', defaultPrevented: false, altKey: false, ctrlKey: false, metaKey: false, shiftKey: false, ...over});

describe('isPageEscape', () => {
  it('takes a plain Escape with the focus on a button, a link or nothing', () => {
    expect(isPageEscape(key(), {tagName: 'BUTTON'})).toBe(true);
    expect(isPageEscape(key(), {tagName: 'A'})).toBe(true);
    expect(isPageEscape(key(), null)).toBe(true);
  });

  it('leaves text fields, lists, handled keys, modified keys and other keys alone', () => {
    for (const tagName of ['INPUT', 'TEXTAREA', 'SELECT']) expect(isPageEscape(key(), {tagName})).toBe(false);
    expect(isPageEscape(key(), {tagName: 'DIV', isContentEditable: true})).toBe(false);
    expect(isPageEscape(key({defaultPrevented: true}), {tagName: 'BUTTON'})).toBe(false);
    expect(isPageEscape(key({shiftKey: true}), {tagName: 'BUTTON'})).toBe(false);
    expect(isPageEscape(key({key: 'Enter'}), {tagName: 'BUTTON'})).toBe(false);
  });
});
