import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

// OUTBOX_TEST_CANARY=1 runs only the deliberately failing canary (see test/canary/), which `.ci/run`
// uses to prove that `npm test` exits non-zero when a test fails.
const canary = process.env.OUTBOX_TEST_CANARY === '1';

// OUTBOX_TEST_POSTGRES=4 runs the tests on postgres 4 (the `postgres4` alias of the root
// devDependencies) instead of 3: the producer's peer range takes both majors, so its suite and the
// consumer's, whose code shares the platform's connections, are run on each (`.ci/run`).
const postgresMajor = process.env.OUTBOX_TEST_POSTGRES ?? '3';
if (postgresMajor !== '3' && postgresMajor !== '4') {
  throw new Error(`OUTBOX_TEST_POSTGRES must be 3 or 4, got ${JSON.stringify(postgresMajor)}`);
}
// OUTBOX_TEST_PEERS=<a node_modules folder> runs them on the peers installed there instead of the
// root's (`npm run test:peers`, scripts/peer-matrix.ts: each peer's lowest and latest). Only the
// modules vitest loads are redirected; a process a test starts (a CLI, a synth) uses the root's.
const PEERS = ['postgres', 'pg', 'drizzle-orm', 'kysely', 'aws-cdk-lib', 'constructs'];
const peersDir = process.env.OUTBOX_TEST_PEERS;
const alias = [
  ...(postgresMajor === '4' ? [{ find: /^postgres$/, replacement: 'postgres4' }] : []),
  ...(peersDir
    ? PEERS.filter((name) => existsSync(join(peersDir, name, 'package.json'))).map((name) => ({
        find: new RegExp(`^${name}(/.*)?$`),
        replacement: `${join(peersDir, name)}$1`,
      }))
    : []),
];

export default defineConfig({
  resolve: {
    alias,
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
