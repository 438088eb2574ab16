/** `createRelay`, the relay's composition root, against the real Postgres and the local bus. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { connect } from '../../shared/platform/db.ts';
import { OutboxConfigError } from '../../shared/platform/errors.ts';
import { enqueueMany } from '../../shared/producer/enqueue.ts';
import { createRelay } from '../../shared/relay/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;
let bus: LocalBus;
beforeAll(async () => {
  db = await createTestDatabase();
  bus = await startLocalBus();
});
afterAll(async () => {
  await db?.drop();
  await bus?.close();
});

const clientConfig = () => ({
  endpoint: bus.url,
  region: 'us-east-1',
  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
});
const sessions = async (applicationName: string) => {
  const [row] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where application_name = ${applicationName} and datname = current_database()`;
  return row?.n ?? 0;
};

describe('createRelay', () => {
  it('wires settings, pool and client from the environment, relays, and closes the pool it opened', async () => {
    await db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: 30 }, (_, i) => ({
          type: 'T',
          source: 's',
          aggregateType: 'root',
          aggregateId: String(i),
          payload: {},
        })),
      ),
    );
    const relay = createRelay({
      env: { DATABASE_URL: db.url, EVENT_BUS_NAME: 'root-bus', OUTBOX_POLL_INTERVAL_MS: '20' },
      applicationName: 'create-relay-owned',
      clientConfig: clientConfig(),
    });
    expect(relay.settings).toMatchObject({ eventBusName: 'root-bus', pollIntervalMs: 20, batchSize: 100 });
    const result = await relay.run({ untilEmpty: true });
    expect(result).toMatchObject({ published: 30, stopReason: 'empty' });
    expect(bus.events.filter((e) => e.eventBusName === 'root-bus')).toHaveLength(30);
    expect(await sessions('create-relay-owned')).toBeGreaterThan(0);
    await relay.close();
    expect(await sessions('create-relay-owned')).toBe(0);
  });

  it('leaves a pool it was given open, and runs one pass with once()', async () => {
    await db.sql.begin((tx) =>
      enqueueMany(tx, [{ type: 'T', source: 's', aggregateType: 'given', aggregateId: '1', payload: {} }]),
    );
    const sql = connect({ url: db.url, max: 2, env: {}, applicationName: 'create-relay-given' });
    try {
      const relay = createRelay({ env: { EVENT_BUS_NAME: 'given-bus' }, sql, clientConfig: clientConfig() });
      expect(await relay.once()).toMatchObject({ claimed: 1, published: 1 });
      await relay.close();
      expect((await sql`select 1 as one`)[0]).toEqual({ one: 1 });
    } finally {
      await sql.end({ timeout: 5 });
    }
  });

  it('refuses a malformed setting before opening anything, naming the variable', () => {
    let caught: unknown;
    try {
      createRelay({ env: { DATABASE_URL: db.url, EVENT_BUS_NAME: 'b', OUTBOX_IDLE_RETURN_SECONDS: '-1' } });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(OutboxConfigError);
    expect((caught as Error).message).toMatch(
      /^OUTBOX_IDLE_RETURN_SECONDS: must be a whole number from 0 to 900 \(seconds\) \(got "-1"\)/,
    );
  });
});
