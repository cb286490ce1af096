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
main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, env: process.env }).then(
  (code) => {
    // Set, not exit(): stdout still drains when it is a pipe.
    process.exitCode = code;
    // A client that keeps a socket or timer open must not keep the command alive.
    setTimeout(() => process.exit(code), 2000).unref();
  },
);
