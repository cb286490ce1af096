import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    // Two files at a time, also on a 2-core machine (vitest's default there is one): most of the
    // slow files wait on servers, worker processes and clocks rather than on the CPU, and the
    // whole suite takes about 6 minutes instead of 11.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 120_000,
    globalSetup: ['./test/helpers/global-setup.ts'],
  },
});
