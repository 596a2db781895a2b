/**
 * When a user action's result is on screen: the time from the action (`markAction`, first_highlight.ts) to the first
 * frame painted with its result, said on the element (`data-last-action`, `data-last-action-ms`) and by a
 * `salience-rendered` event ({name, ms}), which tests and benchmarks read.
 */
import type {Action} from './first_highlight.js';

/** After the render that shows `action`'s result (the controller's `finishedAction`): reports it once painted. */
export function reportWhenPainted(element: HTMLElement, action: Action) {
  const {name, t} = action;
  requestAnimationFrame(() => setTimeout(() => {
    const ms = performance.now() - t;
    element.dataset['lastAction'] = name;
    element.dataset['lastActionMs'] = ms.toFixed(1);
    element.dispatchEvent(new CustomEvent('salience-rendered', {detail: {name, ms}, bubbles: true, composed: true}));
  }, 0));
}
