import { defineConfig } from 'vitest/config';

// OUTBOX_TEST_CANARY=1 runs only the deliberately failing canary (see test/canary/), which `.ci/run`
// uses to prove that `npm test` exits non-zero when a test fails.
const canary = process.env.OUTBOX_TEST_CANARY === '1';

export default defineConfig({
  test: {
    include: canary ? ['test/canary/*.canary.ts'] : ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    env: { POWERTOOLS_LOG_LEVEL: 'WARN' },
  },
});
