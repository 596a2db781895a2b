/**
 * The salience module's host (src/salience/controller.ts `SalienceHost`) as its DOM-free tests fake it: model "m",
 * the first highlight answered with the small payload fixture, segment requests answered by the test.
 */
import fixture from '../fixtures/small_payload.json';
import type {SalienceHost} from '../../src/salience/page.js';
import {salienceModels, type Rows} from './fake_server.js';

export type Data = Record<string, unknown>;

/**
 * A host for model "m" whose salience wrapper publishes `registry`: a segment request (detail "segments") is
 * answered with `segments(data)`, the question how many of its segments the server knows exactly (a method's
 * `known_detail`) with `known` (none by default), any other with a fresh copy of the small payload fixture; `calls`
 * lists every request's data in order. `extra`: host members to add or replace (e.g. patternBounds).
 */
export function fakeSalienceHost(registry: unknown, segments: (data: Data) => Rows, extra: Partial<SalienceHost> = {},
                                 known: {method: string; measured: number} | null = null) {
  const calls: Data[] = [];
  const knownDetails = new Set((registry as Array<{known_detail?: string | null}>).map((m) => m.known_detail));
  const host: SalienceHost = {
    modelName: () => 'm',
    models: () => salienceModels(registry),
    getPreds: async (inputs) => {
      const data = inputs[0].data;
      calls.push(data);
      if (knownDetails.has(data['detail'] as string)) {
        return [{salience: {detail: {kind: 'segments_known', state: 'done', done: 0, total: 0}, known_exact: known}}];
      }
      return data['detail'] === 'segments' ? segments(data) : [{salience: structuredClone(fixture)}];
    },
    loadLatest: (_key, promise) => promise,
    changed: () => {},
    ...extra,
  };
  return {host, calls};
}

/**
 * `registry` (the published registry, as the fixture holds it) with `method` the first map at `granularities` and no
 * other method's (null: no first map anywhere, the gradient stays it), as a server would publish it whatever the
 * shipped held-out figures say: a test of one of the two paths does not flip when the fixture follows new figures.
 */
export function withFirstMap<M extends {name: string}>(registry: M[], method: string | null,
                                                       granularities: string[] = ['sentence']): M[] {
  return registry.map((m) => ({...m, first_map_at: m.name === method ? [...granularities] : []}));
}
