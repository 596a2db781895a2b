/**
 * A stand-in for LIT's services as the DOM-free controllers see them (src/shared/jobs.ts
 * `ServerHost`): getPreds records each call and answers with the test's function; `changed()`
 * counts re-renders. Tests name the models the server has.
 */
import type {ServerHost} from '../../src/shared/jobs.js';
import type {IndexedInputLike, ModelInfoLike} from '../../src/shared/request.js';

export interface Call {
  input: IndexedInputLike;
  model: string;
  fields: string[];
}

export type Rows = Array<Record<string, unknown>>;
export type Answer = (c: Call) => Promise<Rows> | Rows;

/** A host for `models` whose getPreds answers with `answer`; `calls` lists every request in order. */
export function fakeServer(models: Record<string, ModelInfoLike>, answer: Answer) {
  const calls: Call[] = [];
  let changes = 0;
  const host: ServerHost = {
    models: () => models,
    getPreds: async (inputs, model, fields) => {
      const c = {input: inputs[0], model, fields};
      calls.push(c);
      return answer(c);
    },
    changed: () => { changes++; },
  };
  return {host, calls, changes: () => changes};
}

/** A promise with its resolve and reject, for answers the test gives later. */
export function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<T>((res, rej) => { resolve = res; reject = rej; });
  return {promise, resolve, reject};
}
