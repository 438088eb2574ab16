import { defineConfig } from 'vitest/config';

// OUTBOX_TEST_CANARY=1 runs only the deliberately failing canary (see test/canary/), which `.ci/run`
// uses to prove that `npm test` exits non-zero when a test fails.
const canary = process.env.OUTBOX_TEST_CANARY === '1';

// OUTBOX_TEST_POSTGRES=4 runs the tests on postgres 4 (the `postgres4` alias of the root
// devDependencies) instead of 3: the producer's peer range takes both majors, so its suite and the
// consumer's, whose code shares the platform's connections, are run on each (`.ci/run`,
// `npm run test:peers`).
const postgresMajor = process.env.OUTBOX_TEST_POSTGRES ?? '3';
if (postgresMajor !== '3' && postgresMajor !== '4') {
  throw new Error(`OUTBOX_TEST_POSTGRES must be 3 or 4, got ${JSON.stringify(postgresMajor)}`);
}

export default defineConfig({
  resolve: {
    alias: postgresMajor === '4' ? [{ find: /^postgres$/, replacement: 'postgres4' }] : [],
  },
  test: {
    include: canary ? ['test/canary/*.canary.ts'] : ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    env: { POWERTOOLS_LOG_LEVEL: 'WARN' },
  },
});
