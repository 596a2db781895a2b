// Evaluates diffKeys of frontend/src/salience/compare/alignment.ts (bundled by esbuild to the path in argv[2]) on the
// [a, b] key lists read from stdin (JSON) and prints their opcodes as JSON; see tests/unit/test_alignment_cases.py.
import {readFileSync} from 'node:fs';
import {pathToFileURL} from 'node:url';

const logic = await import(pathToFileURL(process.argv[2]).href);
const pairs = JSON.parse(readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(pairs.map(([a, b]) => logic.diffKeys(a, b))));
