import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../dev/local-bus.ts';
import { enqueue } from '../shared/producer.ts';
import { runRelay } from '../shared/relay/relay.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';
import { testClient, testSettings } from './support/relay.ts';

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

describe('smoke', () => {
  it('publishes a committed event', async () => {
    await db.sql.begin(async (tx) => {
      await enqueue(tx, { type: 'OrderPlaced', source: 'shop.orders', aggregateType: 'order', aggregateId: '1', payload: { total: 5 } });
    });
    const r = await runRelay({ sql: db.sql, client: testClient(bus.url), settings: testSettings(), untilEmpty: true });
    expect(r.published).toBe(1);
    expect(bus.events[0]?.detail).toMatchObject({ metadata: { aggregateId: '1', sequence: 1 }, data: { total: 5 } });
  });
});
