import {describe, expect, it} from 'vitest';

import {describeStream, parseStream} from '../src/salience/stream.js';
import {explainsGeneration, streamInput} from '../src/salience/request.js';

const input = {id: 'a1', data: {prompt: 'Hi', target: ''}, meta: {}};

describe('streaming the response', () => {
  it('asks for the stream under a derived id, in full, with the tokens shown (a long poll)', () => {
    const s = streamInput(input, 3, 5);
    expect(s.id).toBe('a1~stream-3');
    expect(s.data).toEqual({prompt: 'Hi', target: '', detail: 'stream', stream_after: 5, _id: 'a1~stream-3'});
    expect(s.meta['added']).toBe(true);
  });

  it('streams only the model\'s own response', () => {
    expect(explainsGeneration(input)).toBe(true);
    expect(explainsGeneration({...input, data: {prompt: 'Hi'}})).toBe(true);
    expect(explainsGeneration({...input, data: {prompt: 'Hi', target: ' Paris'}})).toBe(false);
  });

  it('reads a stream answer and nothing else', () => {
    const stream = {state: 'running', text: 'It arrives', tokens: 3, max_new_tokens: 64, stopped_by: ''};
    expect(parseStream({stream})).toEqual(stream);
    expect(parseStream({detail: {state: 'running'}})).toBeNull();
    expect(parseStream({stream: {state: 'running'}})).toBeNull();
    expect(parseStream(null)).toBeNull();
  });

  it('says how far the response is', () => {
    expect(describeStream({state: 'running', text: 'It', tokens: 3, max_new_tokens: 64, stopped_by: ''}))
        .toBe('Generating the response: 3 of at most 64 tokens…');
    expect(describeStream({state: 'done', text: 'It is 4:05.', tokens: 7, max_new_tokens: 64, stopped_by: 'eos'}))
        .toBe('Response generated (7 tokens); computing its salience…');
    expect(describeStream({state: 'done', text: '4', tokens: 1, max_new_tokens: 64, stopped_by: 'eos'}))
        .toBe('Response generated (1 token); computing its salience…');
    expect(describeStream({state: 'queued', text: '', tokens: 0, max_new_tokens: 64, stopped_by: ''}))
        .toBe('Waiting for the model…');
    expect(describeStream(null)).toBe('Waiting for the model…');
  });
});
