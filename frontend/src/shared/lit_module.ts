/**
 * What every module of this bundle needs from LIT, written once: the part of
 * LIT's LitModule the modules use (typed here, since LIT's client is not on
 * npm and its class is found at run time, see ../index.ts), and `moduleBase`,
 * which turns LIT's LitModule into a base class carrying a module's static
 * facts (title, columns, info text, template, when to show it, styles and
 * reactive state) and, if it asks, follows the salience module's target. Every
 * module is shown once per selected model (LIT's `duplicateForModelComparison`)
 * and names its model (`modelName()`, `modelLabelView`). A module then only
 * writes its own behaviour:
 *
 *     class InsideModelModule extends moduleBase(LitModule, {tag: INSIDE_TAG, title: ..., ...}) { ... }
 *     defineOnce(INSIDE_TAG, InsideModelModule);
 */
import {css, html, type CSSResultGroup, type LitElement, type PropertyValues, type TemplateResult} from 'lit';
import {html as staticHtml, unsafeStatic} from 'lit/static-html.js';

import type {PatternBounds} from './aggregate/index.js';
import {FORCED_TARGET_STYLES} from './forced_target.js';
import {METHOD_HELP_STYLES} from './method_help.js';
import type {ServerHost} from './jobs.js';
import {activeModel, shouldDisplay, type IndexedInputLike, type ModelInfoLike} from './request.js';
import {targetStore, type SharedTarget} from './target_store.js';

/** The LIT services the modules use (docs/architecture.md, "Frontend rooms"). */
export interface LitServices {
  model: string;
  selectionService: {primarySelectedInputData: IndexedInputLike | null};
  appState: {currentDataset: string; currentModels: string[];
             metadata: {models: Record<string, ModelInfoLike>;
                        /** Our server's request limits (lit_app/server.py `publish_limits`). */
                        requestLimits?: {max_counts?: Record<string, number>; pattern?: PatternBounds}};
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

/** What the base class adds to every module. */
export interface ModuleFacts {
  /**
   * The LIT model this instance shows: the one LIT rendered it for (one instance per selected model) while
   * that is selected, else the first selected (shared/request.ts `activeModel`).
   */
  modelName(): string;
}

export type ModuleBase = new () => LitElement & LitServices & ModuleHooks & ModuleFacts;

/** The label in each module's header line that names the model it shows. */
export function modelLabelView(model: string): TemplateResult {
  return html`<span class="model-name" title="The model this module shows (LIT shows each module once per selected model)"
      >model: <b>${model || '(none selected)'}</b></span>`;
}

const MODEL_LABEL_STYLES = css`
  .model-name { font-size: 12px; color: #3c4043; background: #f1f3f4; border-radius: 10px; padding: 1px 8px;
                white-space: nowrap; }
`;

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
 * this bundle shows when a model has a salience or response output (`shouldDisplay`), once per
 * selected model (LIT renders one instance per model, with the model's name as its `model`
 * attribute and the widget's subtitle), and one instance for all examples.
 */
export function moduleBase(LitModule: unknown, info: ModuleInfo): ModuleBase {
  const Base = LitModule as new () => LitElement & LitServices;
  const baseStyles = (LitModule as {styles?: CSSResultGroup}).styles;
  const tag = unsafeStatic(info.tag);
  const properties = Object.fromEntries(info.state.map((name) => [name, {state: true}]));

  class SequenceSalienceModule extends Base {
    static title = info.title;
    static numCols = info.numCols;
    static duplicateForModelComparison = true;
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
      return [...base, FORCED_TARGET_STYLES, METHOD_HELP_STYLES, MODEL_LABEL_STYLES, info.styles];
    }

    private unfollow: (() => void) | null = null;
    /** The model whose salience module's target this instance follows. */
    private followed: string | null = null;

    modelName(): string {
      return activeModel(this.model, this.appState?.currentModels ?? []);
    }

    override connectedCallback() {
      super.connectedCallback();
      this.follow();
    }

    override updated(changed: PropertyValues) {
      (super.updated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.follow();  // LIT gave this element another model, or the selected models changed
    }

    override disconnectedCallback() {
      this.unfollow?.();
      this.unfollow = null;
      this.followed = null;
      super.disconnectedCallback();
    }

    /** With `followsTarget`: follows the target of this instance's model (shared/target_store.ts). */
    private follow() {
      if (!info.followsTarget || !this.isConnected) return;
      const model = this.modelName();
      if (model === this.followed && this.unfollow !== null) return;
      this.unfollow?.();
      this.followed = model;
      this.unfollow = targetStore.subscribe(model, (t) => this.onTarget(t));
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
    patternBounds: () => module.appState.metadata?.requestLimits?.pattern,
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
