#!/usr/bin/env node
// Runs the whole test suite with vitest and closes with a plain line "N passed, M failed"
// (read by CI), computed from vitest's JSON report. Fails when any test failed or none ran.
// Extra arguments go to vitest (e.g. `npm test -- test/unit`). When the output is not a
// terminal (CI, a log file), it is plain: no colour codes, and only tests slower than 2 s are
// listed as slow (the contract suite repeats the same few-hundred-ms case on every store).
// VALVE_TEST_REPORT names the JSON report (default .vitest-report.json).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';

const report = process.env.VALVE_TEST_REPORT || '.vitest-report.json';
const plain = !process.stdout.isTTY;
rmSync(report, { force: true });
const args = [
  'vitest',
  'run',
  '--reporter=default',
  '--reporter=json',
  `--outputFile.json=${report}`,
  ...(plain ? ['--slowTestThreshold=2000'] : []),
  ...process.argv.slice(2),
];
const env = { ...process.env };
if (plain) {
  env.NO_COLOR = '1';
  delete env.FORCE_COLOR;
}
const result = spawnSync('npx', args, { stdio: 'inherit', env });

let passed = 0;
let failed = 0;
let skipped = 0;
if (existsSync(report)) {
  const json = JSON.parse(readFileSync(report, 'utf8'));
  passed = json.numPassedTests ?? 0;
  // Tests, not describe blocks: one failing test also marks every block around it as failed.
  failed = json.numFailedTests ?? 0;
  skipped = (json.numPendingTests ?? 0) + (json.numTodoTests ?? 0);
  // A file that failed with no failing test failed outside any test (an import error, a
  // throwing beforeAll/afterAll hook): counted once per file.
  for (const file of json.testResults ?? []) {
    const failedTests = (file.assertionResults ?? []).filter((t) => t.status === 'failed').length;
    if (file.status === 'failed' && failedTests === 0) {
      failed += 1;
      console.error(
        `test: ${file.name} failed outside its tests${file.message ? `: ${file.message.split('\n')[0]}` : ''}`,
      );
    }
  }
  // vitest failed for a reason no file shows (e.g. an unhandled error between tests).
  if (result.status !== 0 && failed === 0) {
    failed = 1;
    console.error(`test: vitest exited with ${result.status} although no test failed`);
  }
} else {
  failed = 1;
  console.error('test: vitest wrote no JSON report');
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
if (result.status !== 0 || failed > 0 || passed === 0) {
  if (passed === 0) console.error('test: no test ran');
  process.exit(result.status || 1);
}
