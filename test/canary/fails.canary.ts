/**
 * The canary: every test here must fail. `.ci/run` runs this file alone (OUTBOX_TEST_CANARY=1
 * selects it; the normal `include` pattern never does) and refuses to trust the real run unless
 * `npm test` exits non-zero and reports these three failures: an assertion, an error and a timeout.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, inject, it } from 'vitest';

it('fails an assertion', () => {
  expect(1 + 1).toBe(3);
});

it('throws', () => {
  throw new Error('canary: a test that throws must fail the run');
});

it('times out', async () => {
  await sleep(2_000);
}, 200);

it('runs with the same global setup as the suite (a database URL is provided)', () => {
  // The one test meant to pass: the canary ran through the real global setup, embedded Postgres
  // included, so a setup that swallows the exit status would be caught here.
  expect(inject('databaseUrl')).toMatch(/^postgres(ql)?:\/\//);
});
