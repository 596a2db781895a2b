// Evaluates frontend/src/colormap.ts (bundled by esbuild to the path in argv[2]) on the
// cases read from stdin (JSON) and prints the results as JSON; see tests/unit/test_display.py.
import {readFileSync} from 'node:fs';
import {pathToFileURL} from 'node:url';

const cm = await import(pathToFileURL(process.argv[2]).href);
const cases = JSON.parse(readFileSync(0, 'utf8'));
const fix = (v) => (v === null ? NaN : v);  // JSON has no NaN: null stands for it
const out = {
  constants: {NEGATIVE: cm.NEGATIVE, POSITIVE: cm.POSITIVE, SEQUENTIAL: cm.SEQUENTIAL, LEVELS: cm.LEVELS},
  colorFor: cases.colorFor.map(([v, signed, scale, intensity]) => {
    const c = cm.colorFor(fix(v), {signed, scale, intensity});
    return [c.bg, c.fg];
  }),
  legendStops: cases.scales.map(([signed, scale, intensity]) =>
    cm.legendStops({signed, scale, intensity}, 5).map((s) => [s.value, s.color])),
  legendGradient: cases.scales.map(([signed, scale, intensity]) => cm.legendGradient({signed, scale, intensity})),
  formatValue: cases.formatValue.map((v) => cm.formatValue(fix(v))),
  maxAbs: cases.maxAbs.map((vs) => cm.maxAbs(vs.map(fix))),
  textColorOn: cases.rgb.map((c) => cm.textColorOn(c)),
};
process.stdout.write(JSON.stringify(out));
