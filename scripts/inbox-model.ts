/**
 * A long run of the inbox's model-based test: `npm run test:inbox-model -- --runs 10000 --seed 42`.
 * Without --seed it draws one and prints it first, so that any run can be replayed. Prints the
 * runs, the seed and the time taken at the end; exits with the test's status.
 */
import { spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const usage = 'usage: npm run test:inbox-model -- [--runs <n>] [--seed <integer>]';
let values: { runs?: string; seed?: string };
try {
  ({ values } = parseArgs({
    options: { runs: { type: 'string', default: '1000' }, seed: { type: 'string' } },
  }));
} catch (error) {
  console.error(`${(error as Error).message}\n${usage}`);
  process.exit(2);
}
const runs = Number(values.runs);
const seed = values.seed === undefined ? randomInt(-(2 ** 31), 2 ** 31) : Number(values.seed);
if (!Number.isSafeInteger(runs) || runs < 1 || !Number.isSafeInteger(seed)) {
  console.error(`--runs must be a whole number from 1, --seed an integer\n${usage}`);
  process.exit(2);
}
console.log(`inbox model: ${runs} runs, seed ${seed}`);
const root = fileURLToPath(new URL('..', import.meta.url));
const started = performance.now();
const run = spawnSync(
  process.execPath,
  [`${root}node_modules/vitest/vitest.mjs`, 'run', 'test/consumer/inbox-model.test.ts'],
  {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, INBOX_MODEL_RUNS: String(runs), INBOX_MODEL_SEED: String(seed) },
  },
);
const seconds = (performance.now() - started) / 1000;
console.log(
  `inbox model: ${runs} runs, seed ${seed}, ${seconds.toFixed(0)} s: ${run.status === 0 ? 'passed' : 'FAILED'}`,
);
process.exit(run.status ?? 1);
