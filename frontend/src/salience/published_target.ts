/**
 * What the salience module tells the other modules of its model (../shared/target_store.ts): the selection, its
 * payload and the target span, or null while there is none. A module switched to another model clears the old
 * model's target; one that leaves the page clears its own.
 */
import {targetStore} from '../shared/target_store.js';
import type {SaliencePage} from './page.js';

export class TargetPublisher {
  /** The model whose target this instance published last (shared/target_store.ts). */
  private publishedModel: string | null = null;

  /** Tells the other modules of `model` what is selected on `page`, at the granularity the element shows. */
  publish(model: string, page: SaliencePage, granularity: string) {
    if (this.publishedModel !== null && this.publishedModel !== model) targetStore.publish(this.publishedModel, null);
    this.publishedModel = model;
    const {payload: p, input: d, salienceModel} = page;
    if (p === null || d === null || salienceModel === null) {
      targetStore.publish(model, null);
      return;
    }
    targetStore.publish(model, {
      datapointId: d.id, input: d.data, salienceModel, text: p.text,
      promptEnd: p.prompt_end, tokens: p.tokens, offsets: p.offsets, nPromptTokens: p.n_prompt_tokens,
      t0: page.span.t0, t1: page.span.t1, method: page.method, granularity,
    });
  }

  /** The element left the page: the other modules of its model see no target. */
  clear() {
    if (this.publishedModel !== null) targetStore.publish(this.publishedModel, null);
    this.publishedModel = null;
  }
}
