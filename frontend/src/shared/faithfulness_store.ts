/**
 * The faithfulness test ("Test this explanation", its curves) finished last, per salience model, with the
 * target it tested; "Share this view" (../salience/share.ts) puts the one of the target on screen into the
 * shared page. A plain singleton, as target_store.ts (one bundle = one instance of this file).
 */

/** Which target a test tested: the datapoint, its explained text and the target span [t0, t1). */
export interface TestedTarget {
  datapointId: string;
  text: string;
  t0: number;
  t1: number;
}

/** A finished curves payload (lit_app/wrappers/explain.py) and its target. */
export interface SharedFaithfulness extends TestedTarget {
  payload: Readonly<Record<string, unknown>>;
}

/** The latest finished test by the salience model whose target it followed. */
export class FaithfulnessStore {
  private readonly latest = new Map<string, SharedFaithfulness>();

  /** The explain module finished the curves of `f`'s target (a newer test of any target replaces it). */
  publish(salienceModel: string, f: SharedFaithfulness) {
    this.latest.set(salienceModel, f);
  }

  /** The latest test's payload when it tested exactly target `t` (datapoint, text and span), else null. */
  of(salienceModel: string, t: TestedTarget): Readonly<Record<string, unknown>> | null {
    const f = this.latest.get(salienceModel);
    if (f === undefined) return null;
    const same = f.datapointId === t.datapointId && f.text === t.text && f.t0 === t.t0 && f.t1 === t.t1;
    return same ? f.payload : null;
  }
}

/** The bundle-wide store. */
export const faithfulnessStore = new FaithfulnessStore();
