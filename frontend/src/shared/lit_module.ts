/**
 * What every module of this bundle needs from LIT, written once: the part of
 * LIT's LitModule the modules use (typed here, since LIT's client is not on
 * npm and its class is found at run time, see ../index.ts), and `moduleBase`,
 * which turns LIT's LitModule into a base class carrying a module's static
 * facts (title, columns, info text, template, when to show it, styles and
 * reactive state) and, if it asks, follows the salience module's target. A
 * module then only writes its own behaviour:
 *
 *     class InsideModelModule extends moduleBase(LitModule, {tag: INSIDE_TAG, title: ..., ...}) { ... }
 *     defineOnce(INSIDE_TAG, InsideModelModule);
 */
import type {CSSResultGroup, LitElement, TemplateResult} from 'lit';
import {html as staticHtml, unsafeStatic} from 'lit/static-html.js';

import {FORCED_TARGET_STYLES} from './forced_target.js';
import type {ServerHost} from './jobs.js';
import {shouldDisplay, type IndexedInputLike, type ModelInfoLike} from './request.js';
import {targetStore, type SharedTarget} from './target_store.js';

/** The LIT services the modules use (docs/architecture.md, "Frontend rooms"). */
export interface LitServices {
  model: string;
  selectionService: {primarySelectedInputData: IndexedInputLike | null};
  appState: {currentDataset: string; currentModels: string[];
             metadata: {models: Record<string, ModelInfoLike>;
                        /** Our server's request limits (lit_app/server.py `publish_limits`). */
                        requestLimits?: {max_counts?: Record<string, number>}};
             /** LIT's compare mode: on while a datapoint is pinned (toolbar *Pin*, editor *Add and compare*). */
             compareExamplesEnabled?: boolean};
  apiService: {
    getPreds(inputs: IndexedInputLike[], model: string, dataset: string, requestedTypes: unknown[],
             requestedFields: string[], loadMessage?: string): Promise<Array<Record<string, unknown>>>;
  };
  loadLatest<T>(key: string, promise: Promise<T>): Promise<T | null>;
  reactImmediately<T>(getter: () => T, effect: (v: T) => void): void;
}

/** What a module may override. */
export interface ModuleHooks {
  /** With `followsTarget`: called on connecting and on every change of the salience module's target. */
  onTarget(t: SharedTarget | null): void;
}

export type ModuleBase = new () => LitElement & LitServices & ModuleHooks;

/** A module's static facts, as LIT's layout and module picker read them. */
export interface ModuleInfo {
  /** Custom-element tag. */
  tag: string;
  title: string;
  /** Width in LIT's 12-column grid. */
  numCols: number;
  /** The text of the module's (i) button. */
  infoMarkdown: string;
  /** The module's own styles (LIT's module styles come first). */
  styles: CSSResultGroup;
  /** Names of the reactive state fields: a change re-renders the module. */
  state: readonly string[];
  /** Whether `onTarget` follows the salience module's target (shared/target_store.ts) while connected. */
  followsTarget?: boolean;
}

/**
 * LIT's LitModule (found at run time) extended with the module's static facts. Every module of
 * this bundle shows when a model has a salience or response output (`shouldDisplay`) and is one
 * instance for all models and examples.
 */
export function moduleBase(LitModule: unknown, info: ModuleInfo): ModuleBase {
  const Base = LitModule as new () => LitElement & LitServices;
  const baseStyles = (LitModule as {styles?: CSSResultGroup}).styles;
  const tag = unsafeStatic(info.tag);
  const properties = Object.fromEntries(info.state.map((name) => [name, {state: true}]));

  class SequenceSalienceModule extends Base {
    static title = info.title;
    static numCols = info.numCols;
    static duplicateForModelComparison = false;
    static duplicateForExampleComparison = false;
    static infoMarkdown = info.infoMarkdown;

    static template(model: string, selectionServiceIndex: number, shouldReact: number): TemplateResult {
      return staticHtml`<${tag} model=${model} .shouldReact=${shouldReact}
          selectionServiceIndex=${selectionServiceIndex}></${tag}>`;
    }

    static shouldDisplayModule(modelSpecs: Record<string, ModelInfoLike>): boolean {
      return shouldDisplay(modelSpecs);
    }

    static get properties() {
      return properties;
    }

    static get styles(): CSSResultGroup {
      const base = baseStyles == null ? [] : Array.isArray(baseStyles) ? baseStyles : [baseStyles];
      return [...base, FORCED_TARGET_STYLES, info.styles];
    }

    private unfollow: (() => void) | null = null;

    override connectedCallback() {
      super.connectedCallback();
      if (info.followsTarget) this.unfollow = targetStore.subscribe((t) => this.onTarget(t));
    }

    override disconnectedCallback() {
      this.unfollow?.();
      this.unfollow = null;
      super.disconnectedCallback();
    }

    onTarget(_t: SharedTarget | null): void {}
  }
  return SequenceSalienceModule;
}

/**
 * What a module's DOM-free controller needs from LIT (./jobs.ts `ServerHost`), from the module's
 * services: the model metadata, getPreds on the current dataset, and a re-render on every change.
 */
export function serverHost(module: LitElement & LitServices): ServerHost {
  return {
    models: () => module.appState.metadata?.models ?? {},
    countLimits: () => module.appState.metadata?.requestLimits?.max_counts,
    getPreds: (inputs, model, fields, loadMessage) =>
        module.apiService.getPreds(inputs, model, module.appState.currentDataset, [], fields, loadMessage),
    changed: () => module.requestUpdate(),
  };
}

/** Defines the element unless the tag is taken (the bundle loaded twice, or a test page). */
export function defineOnce(tag: string, cls: CustomElementConstructor): void {
  if (customElements.get(tag) === undefined) customElements.define(tag, cls);
}

/**
 * LIT's pinned-datapoint selection (the `'pinned'` SelectionService): LitModule's `selectionService`
 * getter reads `app.getServiceArray(SelectionService)[this.selectionServiceIndex]`, and index 1 is the
 * pinned one (LIT's core/app.ts). `app` is not reachable from this bundle, so the getter is called with
 * index 1. Null when the getter is not found (another LIT version).
 */
export function pinnedSelection(module: object): {primarySelectedInputData: IndexedInputLike | null} | null {
  let proto: object | null = Object.getPrototypeOf(module);
  while (proto !== null) {
    const getter = Object.getOwnPropertyDescriptor(proto, 'selectionService')?.get;
    if (getter !== undefined) {
      return (getter.call({selectionServiceIndex: 1}) as {primarySelectedInputData: IndexedInputLike | null}) ?? null;
    }
    proto = Object.getPrototypeOf(proto);
  }
  return null;
}
