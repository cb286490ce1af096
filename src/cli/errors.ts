/**
 * The command's failures: each carries its exit code and one line for stderr. Anything else
 * thrown is turned into one line by `oneLine()`, never a stack trace.
 */

/** Exit codes a script can rely on (docs/operating.md, "Exit codes"). */
export const EXIT = {
  /** The command did what was asked (doctor: the store would work). */
  ok: 0,
  /** It could not: the server is unreachable, refused a command, or doctor found a problem. */
  failure: 1,
  /** Bad usage: unknown command or option, a missing or malformed argument. */
  usage: 2,
  /** status or watch: nothing is recorded for this id under this prefix. */
  unknownId: 3,
} as const;

export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

export const usageError = (message: string) => new CliError(EXIT.usage, message);
export const failure = (message: string) => new CliError(EXIT.failure, message);

/** One line describing `err`, for stderr: the server's or the system's own words, no stack. */
export function oneLine(err: unknown): string {
  if (err instanceof CliError) return err.message;
  const e = err as { code?: unknown; message?: unknown; errors?: unknown } | null;
  let message = typeof e?.message === 'string' && e.message !== '' ? e.message : String(err);
  // An AggregateError (node's connect to several addresses) says nothing itself.
  if (message === '' && Array.isArray(e?.errors) && e.errors.length > 0) return oneLine(e.errors[0]);
  if (/^(WRONGPASS|NOAUTH)/.test(message)) message = `authentication failed: ${message}`;
  else if (/^NOPERM/.test(message)) message = `the server refused a command (ACL): ${message}`;
  else if (/^NOSCRIPT/.test(message)) message = `the server has no such script: ${message}`;
  // Messages of valve's own errors start with "valve: ", which the CLI prints first already.
  return message
    .split('\n')[0]!
    .trim()
    .replace(/^valve: /, '');
}
