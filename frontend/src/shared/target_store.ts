/**
 * The target the user selected in the Sequence Salience module, shared with
 * the other modules of this bundle (one bundle = one module instance of this
 * file, so a plain singleton is enough; LIT's mobx is not reachable here).
 *
 * The salience module publishes every change of datapoint or target span;
 * the other modules ("Inside the model", "Test this explanation")
 * subscribe and follow it, so a click in the response drives all of them.
 */

/** What the salience module shows now. */
export interface SharedTarget {
  /** LIT id of the selected datapoint. */
  datapointId: string;
  /** The datapoint's inputs as sent to the server (prompt, system, target, chat, ...). */
  input: Record<string, unknown>;
  /** Name of the salience model that produced the payload (e.g. "_smollm2_salience"). */
  salienceModel: string;
  /** The explained text: prompt + response, and where the response starts. */
  text: string;
  promptEnd: number;
  /** Display tokens and their [start, end) char offsets into `text` (code points). */
  tokens: string[];
  offsets: Array<[number, number]>;
  /** Number of prompt tokens P: target token t is token P + t. */
  nPromptTokens: number;
  /** Selected target span [t0, t1) over the response tokens. */
  t0: number;
  t1: number;
  /** View settings of the salience module. */
  method: string;
  granularity: string;
}

type Listener = (t: SharedTarget | null) => void;

class TargetStore {
  private value: SharedTarget | null = null;
  private readonly listeners = new Set<Listener>();

  get current(): SharedTarget | null {
    return this.value;
  }

  /** Publishes a new target (or null: nothing selected). Listeners run synchronously. */
  publish(t: SharedTarget | null) {
    const v = this.value;
    if (v === t) return;
    if (v !== null && t !== null && sameTarget(v, t)) return;
    this.value = t;
    for (const l of [...this.listeners]) {
      try {
        l(t);
      } catch (e) {
        console.error(e);
      }
    }
  }

  /** Calls `listener` now with the current value and on every change; returns the unsubscribe function. */
  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    listener(this.value);
    return () => {
      this.listeners.delete(listener);
    };
  }
}

function sameTarget(a: SharedTarget, b: SharedTarget): boolean {
  return a.datapointId === b.datapointId && a.salienceModel === b.salienceModel && a.t0 === b.t0 &&
      a.t1 === b.t1 && a.method === b.method && a.granularity === b.granularity && a.text === b.text;
}

/** The bundle-wide store. */
export const targetStore = new TargetStore();
