/**
 * The part of LIT's LitModule our modules use, typed once for all of them. LIT's
 * LitModule class is found at run time (index.ts), so the modules cast it to this
 * shape instead of importing LIT's TypeScript sources.
 */
import type {LitElement} from 'lit';

import type {IndexedInputLike, ModelInfoLike} from '../request.js';

export interface LitServices {
  model: string;
  selectionService: {primarySelectedInputData: IndexedInputLike | null};
  appState: {currentDataset: string; currentModels: string[]; metadata: {models: Record<string, ModelInfoLike>}};
  apiService: {
    getPreds(inputs: IndexedInputLike[], model: string, dataset: string, requestedTypes: unknown[],
             requestedFields: string[], loadMessage?: string): Promise<Array<Record<string, unknown>>>;
  };
  loadLatest<T>(key: string, promise: Promise<T>): Promise<T | null>;
  reactImmediately<T>(getter: () => T, effect: (v: T) => void): void;
}

export type ModuleBase = new () => LitElement & LitServices;

/** LIT's LitModule (an unknown at compile time) as a typed base class, and its styles. */
export function litModuleBase(LitModule: unknown): {Base: ModuleBase; baseStyles: unknown} {
  return {Base: LitModule as ModuleBase, baseStyles: (LitModule as {styles?: unknown}).styles};
}
