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

/**
 * A server of user jobs (lit_app/model/user_jobs.py) on top of `fakeServer`: a request whose `actionField`
 * is "status" answers `{action: 'status', job: job()}` under `outField`, "cancel" answers at once, any
 * other action waits for the test (`runs`, in order); `answer` may answer other requests first (a
 * value other than null). `of(action)` lists the requests of one action.
 */
export function fakeJobServer(models: Record<string, ModelInfoLike>, actionField: string, outField: string,
                              job: () => Record<string, unknown> | null, answer: (c: Call) => Rows | null = () => null) {
  const runs: Array<ReturnType<typeof deferred<Rows>>> = [];
  const server = fakeServer(models, (c: Call) => {
    const own = answer(c);
    if (own !== null) return own;
    const action = c.input.data[actionField];
    if (action === 'status') return [{[outField]: {action: 'status', job: job()}}];
    if (action === 'cancel') return [{[outField]: {action: 'cancel', cancelled: true}}];
    const run = deferred<Rows>();
    runs.push(run);
    return run.promise;
  });
  const of = (action: string) => server.calls.filter((c) => c.input.data[actionField] === action);
  return {...server, runs, of};
}

/** The models of a server with model "m" and its salience wrapper publishing `registry` (the method registry). */
export function salienceModels(registry: unknown): Record<string, ModelInfoLike> {
  return {m: {spec: {output: {response: {}}}},
          _m_salience: {spec: {output: {salience: {__name__: 'LitType'},
                                        method_registry: {__name__: 'LitType', default: registry}}}}} as
      unknown as Record<string, ModelInfoLike>;
}
