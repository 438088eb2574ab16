/**
 * The relay Lambda as deployed from its entry point (functions/relay/handler.ts, configured by its
 * environment only): economy mode (`OUTBOX_IDLE_RETURN_SECONDS`) and the pool size
 * (`OUTBOX_DB_POOL_SIZE`), against the real Postgres and the local bus.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { EnvVar, MONITOR_POOL_SIZE, poolSize } from '../../shared/platform/index.ts';
import { enqueueMany } from '../../shared/producer/enqueue.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
let bus: LocalBus;
let handler: typeof import('../../functions/relay/handler.ts').handler;

beforeAll(async () => {
  db = await createTestDatabase();
  bus = await startLocalBus();
  // What the construct would set, and the two settings under test.
  for (const [variable, value] of Object.entries({
    [EnvVar.databaseUrl]: db.url,
    [EnvVar.eventBusName]: 'economy-bus',
    [EnvVar.idleReturnSeconds]: '2',
    [EnvVar.dbPoolSize]: '2',
    [EnvVar.pollIntervalMs]: '50',
    // Eight lanes of small claims: many statements at once, so the pool's cap is what limits them.
    [EnvVar.pipelineDepth]: '8',
    [EnvVar.batchSize]: '20',
    AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
  }))
    vi.stubEnv(variable, value);
  // The entry point reads its environment once, at import, as a cold start does.
  ({ handler } = await import('../../functions/relay/handler.ts'));
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await db?.drop();
  await bus?.close();
});

const enqueue = (prefix: string, n: number) =>
  db.sql.begin((tx) =>
    enqueueMany(
      tx,
      Array.from({ length: n }, (_, i) => ({
        type: 'T',
        source: 's',
        aggregateType: prefix,
        aggregateId: String(i),
        payload: {},
      })),
    ),
  );

describe('economy mode (OUTBOX_IDLE_RETURN_SECONDS)', () => {
  it('returns after the quiet period, long before its deadline, with stopReason idle', async () => {
    await enqueue('first', 20);
    const started = performance.now();
    // An event committed while the invocation polls is still relayed by it, and restarts the quiet period.
    const late = new Promise((resolve) => setTimeout(resolve, 1_000)).then(() => enqueue('late', 1));
    const summary = await handler({}, lambdaContext(60_000, 'outbox-relay'));
    const took = performance.now() - started;
    await late;
    expect(summary).toMatchObject({ published: 21, retried: 0, stopReason: 'idle' });
    // Quiet for 2 s after the late event (at 1 s); the deadline was 52 s away.
    expect(took).toBeGreaterThanOrEqual(3_000);
    expect(took).toBeLessThan(20_000);
    expect(bus.events).toHaveLength(21);
  }, 40_000);

  it('an extra relay of the monitor drains instead: it is not idle-returned', async () => {
    await enqueue('extra', 5);
    const summary = await handler({ scaleOut: { forSeconds: 30 } }, lambdaContext(60_000, 'outbox-relay'));
    expect(summary).toMatchObject({ published: 5, stopReason: 'empty', scaleOut: true });
  }, 40_000);
});

describe('OUTBOX_DB_POOL_SIZE', () => {
  it('caps the relay Lambda’s connections (it used to be publish concurrency + 1 whatever the setting)', async () => {
    await enqueue('pool', 3_000);
    let peak = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const [row] = await db.sql<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
          where application_name = 'outbox-relay' and datname = current_database()`;
        peak = Math.max(peak, row?.n ?? 0);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    try {
      const summary = await handler({}, lambdaContext(60_000, 'outbox-relay'));
      expect(summary).toMatchObject({ published: 3_000, stopReason: 'idle' });
    } finally {
      sampling = false;
      await sampler;
    }
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(2);
  }, 60_000);

  it('is each role’s own default when unset, and validated when set', () => {
    expect(poolSize(MONITOR_POOL_SIZE, {})).toBe(MONITOR_POOL_SIZE);
    expect(poolSize(MONITOR_POOL_SIZE, { OUTBOX_DB_POOL_SIZE: '3' })).toBe(3);
    expect(() => poolSize(MONITOR_POOL_SIZE, { OUTBOX_DB_POOL_SIZE: '0' })).toThrow(
      /^OUTBOX_DB_POOL_SIZE: must be a whole number from 1 to 100/,
    );
  });
});
