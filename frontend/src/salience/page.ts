/**
 * What the salience controller (controller.ts) shares with its parts: LIT's services as the page needs them
 * (`SalienceHost`), the poll period, and the selection the parts read and settle (`SaliencePage`, which the
 * controller is). The parts are span_requests.ts (spans asked of the server), matrices.ts (the per-token
 * matrices computed in the background), segments.ts (the segment methods and the automatic switch to them) and
 * stream.ts (the response as it is generated). Types and one number: no part imports the controller.
 */
import type {JobClientOptions, ServerHost} from '../shared/jobs.js';
import type {MethodRegistry} from '../shared/methods.js';
import type {IndexedInputLike} from '../shared/request.js';
import type {MethodPayload, SaliencePayload} from './payload.js';
import type {Extra, SegmentAsk} from './request.js';
import type {TargetSpan} from './spans.js';
import type {ServerValues} from './values.js';

/** How often the module asks for the progress of a background job (the per-token matrices, a segment method). */
export const POLL_MS = 700;

/**
 * How the first highlight's and the span requests' progress is read (../shared/jobs.ts `JobClient`): every
 * POLL_MS, not while the page is hidden, and no more after a failed read (an older server without span
 * progress: the values still come).
 */
export const PROGRESS_READS: JobClientOptions = {pollMs: POLL_MS, statusErrors: 'stop', pauseWhenHidden: true};

/** What the controller needs from LIT (the element passes its services). */
export interface SalienceHost extends ServerHost {
  /** The model the module is for: LIT's module model, else the first selected one. */
  modelName(): string;
  /** LIT's loadLatest: resolves to null when a later call with the same key supersedes it. */
  loadLatest<T>(key: string, promise: Promise<T>): Promise<T | null>;
}

/** Progress or error of a secondary request (IG, span, a per-token matrix), shown beside the text. */
export type SideStatus = {kind: 'loading' | 'error'; text: string} | null;

/** The selection as the parts see it (the controller; see its fields for each). */
export interface SaliencePage {
  readonly host: SalienceHost;
  /** Bumped on every selection: polls and requests of an older one stop. */
  readonly generation: number;
  readonly input: IndexedInputLike | null;
  payload: SaliencePayload | null;
  readonly salienceModel: string | null;
  /** The server's methods once read (`registry()`), else null. */
  readonly reg: MethodRegistry | null;
  method: string;
  gradientMethod: string;
  readonly span: TargetSpan;
  readonly counts: Readonly<Record<string, number>>;
  readonly perToken: Readonly<Record<string, boolean>>;
  side: SideStatus;
  message: string;
  version: number;
  /** What the server sent beyond the payload (span values, extra methods' matrices). */
  readonly values: ServerValues;
  extra(): Extra | null;
  valuesName(): string;
  segmentAsk(method?: string): SegmentAsk | null;
  methodPayload(): MethodPayload | null;
  tokenValues(span?: TargetSpan): Float64Array | null;
  /** Starts whatever server request the view needs now. */
  ensureData(): void;
  /** Drops an error, or the progress of a span request, that is not about what the view shows next. */
  clearSideError(): void;
}
