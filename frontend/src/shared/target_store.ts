/**
 * The target the user selected in the Sequence Salience module, shared with
 * the other modules of this bundle (one bundle = one module instance of this
 * file, so a plain singleton is enough; LIT's mobx is not reachable here).
 *
 * One target per model: with several models selected LIT shows each of our
 * modules once per model (shared/lit_module.ts), and each salience module
 * publishes under its model's name. The other modules ("Inside the model",
 * "Test this explanation") follow the target of their own model, so a click
 * in model b's response drives model b's modules and leaves model a's alone.
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

/** Targets by the LIT model name of the salience module that published them. */
export class TargetStore {
  private readonly values = new Map<string, SharedTarget>();
  private readonly listeners = new Set<{model: string; listener: Listener}>();

  /** What the salience module of `model` shows now (null: nothing selected, or no such module). */
  get(model: string): SharedTarget | null {
    return this.values.get(model) ?? null;
  }

  /** Publishes `model`'s new target (or null: nothing selected). Its listeners run synchronously. */
  publish(model: string, t: SharedTarget | null) {
    const v = this.get(model);
    if (v === t) return;
    if (v !== null && t !== null && sameTarget(v, t)) return;
    if (t === null) this.values.delete(model);
    else this.values.set(model, t);
    for (const {model: m, listener} of [...this.listeners]) {
      if (m !== model) continue;
      try {
        listener(t);
      } catch (e) {
        console.error(e);
      }
    }
  }

  /**
   * Calls `listener` now with `model`'s current target and on every change of it; returns the
   * unsubscribe function.
   */
  subscribe(model: string, listener: Listener): () => void {
    const entry = {model, listener};
    this.listeners.add(entry);
    listener(this.get(model));
    return () => {
      this.listeners.delete(entry);
    };
  }
}

function sameTarget(a: SharedTarget, b: SharedTarget): boolean {
  return a.datapointId === b.datapointId && a.salienceModel === b.salienceModel && a.t0 === b.t0 &&
      a.t1 === b.t1 && a.method === b.method && a.granularity === b.granularity && a.text === b.text;
}

/** The bundle-wide store. */
export const targetStore = new TargetStore();
