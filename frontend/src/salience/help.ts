/** The Sequence Salience module's (i) text, LIT's `infoMarkdown` of the element (../salience_module.ts). */

/** The module's (i) text: how to use it, each method, the colours, signed vs unsigned (two sentences each). */
export const SALIENCE_HELP = [
  'Which parts of the prompt drove the response. Click or drag over the response to choose the target ' +
  '(Escape: whole response); arrows move it, Shift+arrows extend it.',
  '**Gradient norm**: the length of the gradient of log p(target) at each prompt token\'s embedding. One ' +
  'backward pass; it says how strongly a token matters, not in which direction.',
  '**Gradient × input**: the gradient dotted with the token\'s embedding, a first-order estimate of what the ' +
  'token adds to log p(target). One backward pass; signed, but only a local (linear) estimate.',
  '**Integrated gradients**: gradient × input averaged along a path from a baseline (zero embedding) to the ' +
  'prompt, with *IG steps* points. Its values should sum to the log-prob change from the baseline; the ' +
  'completeness error says how far they are, and a warning shows when it is over 5 %.',
  '**SmoothGrad**: gradient × input averaged over *SmoothGrad samples* noisy copies of the embeddings. It ' +
  'is less noisy than one gradient; more samples are smoother and slower.',
  '**Every method**, the segment methods (leave one segment out, the surrogate and its R², coarse-to-fine) ' +
  'too: the ⓘ beside *Method* gives each one in two lines, its cost and when to trust it, the automatic switch ' +
  'from the gradient, *Show gradient* (Alt+G) and the keys.',
  '**Colours**: darker means a larger value, scaled to the largest value outside the target (the legend ' +
  'shows the range; *Intensity* stretches it). Hover a segment for its exact value and rank.',
  '**Signed vs unsigned**: signed methods colour tokens that raise log p(target) red and those that lower ' +
  'it blue (white near zero). Gradient norm is unsigned, one purple scale: magnitude only.',
].join('\n\n');
