#!/usr/bin/env node
// Runs the whole test suite with vitest and closes with a plain line "N passed, M failed"
// (read by CI), computed from vitest's JSON report. Fails when any test failed or none ran.
// Extra arguments go to vitest (e.g. `npm test -- test/unit`).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';

const report = '.vitest-report.json';
rmSync(report, { force: true });
const args = [
  'vitest',
  'run',
  '--reporter=default',
  '--reporter=json',
  `--outputFile.json=${report}`,
  ...process.argv.slice(2),
];
const result = spawnSync('npx', args, { stdio: 'inherit' });

let passed = 0;
let failed = 0;
let skipped = 0;
if (existsSync(report)) {
  const json = JSON.parse(readFileSync(report, 'utf8'));
  passed = json.numPassedTests ?? 0;
  failed = (json.numFailedTests ?? 0) + (json.numFailedTestSuites ?? 0);
  skipped = (json.numPendingTests ?? 0) + (json.numTodoTests ?? 0);
} else {
  failed = 1;
  console.error('test: vitest wrote no JSON report');
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
if (result.status !== 0 || failed > 0 || passed === 0) {
  if (passed === 0) console.error('test: no test ran');
  process.exit(result.status || 1);
}
