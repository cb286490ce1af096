import { main } from '../../src/cli/main.js';

/** What one run of the command gave: its exit code and everything it printed. */
export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the command in this process with `args`; VALVE_REDIS_URL only when given in `env`. */
export async function valve(args: string[], env: Record<string, string> = {}): Promise<Ran> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env,
  });
  return { code, stdout, stderr };
}
