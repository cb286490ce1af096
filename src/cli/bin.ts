/**
 * The `valve` command's entry (package.json `bin`, built by tsup.config.ts `cliConfig`): runs
 * main() with this process's arguments, streams and environment, and ends with its exit code.
 */
import { EXIT, oneLine } from './errors.js';
import { main } from './main.js';

process.on('unhandledRejection', (err) => {
  process.stderr.write(`valve: ${oneLine(err)}\n`);
  process.exit(EXIT.failure);
});
// A reader that went away (`valve watch <id> | head -1`): stop quietly, as other commands do
// on a closed pipe. Anything else on stdout is one line, never a stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(EXIT.ok);
  process.stderr.write(`valve: stdout: ${oneLine(err)}\n`);
  process.exit(EXIT.failure);
});
main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, env: process.env }).then(
  (code) => {
    process.exitCode = code;
    // Exit once what was written is flushed: a client may keep a socket or timer open (ioredis
    // waits 2 s to close a connection that never opened), which must not keep the command alive.
    const exit = () => process.exit(code);
    process.stdout.write('', () => process.stderr.write('', exit));
    setTimeout(exit, 2000).unref();
  },
);
