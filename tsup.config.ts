import { defineConfig, type Options } from 'tsup';

/** The `valve` command (package.json `bin`): one ESM file run by node, the core bundled in. */
export const cliConfig: Options = {
  entry: { cli: 'src/cli/bin.ts' },
  format: ['esm'],
  banner: { js: '#!/usr/bin/env node' },
  dts: false,
  sourcemap: false,
  clean: false,
  splitting: false,
  target: 'node20',
  treeshake: true,
};

export default defineConfig([
  {
    entry: {
      index: 'src/index.ts',
      testing: 'src/testing.ts',
      otel: 'src/otel.ts',
      undici: 'src/undici.ts',
      axios: 'src/axios.ts',
      octokit: 'src/integrations/octokit/index.ts',
    },
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    // The command's file (built by the config below, at the same time) is left alone.
    clean: ['!cli.js'],
    target: 'node20',
    treeshake: true,
  },
  cliConfig,
]);
