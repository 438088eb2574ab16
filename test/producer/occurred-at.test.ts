/**
 * occurredAt (the row's created_at, EventBridge's Time) is when the enqueue numbered the event: the
 * database clock read once the call holds its aggregate's counter row. So within one aggregate it
 * never decreases as sequence grows, however long a producer kept its transaction open before
 * enqueueing (it was the transaction's start, now(), until migration 016).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EnqueueResult, enqueue, enqueueMany } from '../../shared/producer/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const event = (aggregateId: string, n: number, idempotencyKey?: string) => ({
  type: 'TimeTested',
  source: 'test.time',
  aggregateType: 'order',
  aggregateId,
  payload: { n },
  ...(idempotencyKey ? { idempotencyKey } : {}),
});

/** The aggregate's rows in sequence order, with created_at as the database holds it (µs). */
const rowsOf = (aggregateId: string) =>
  db.sql<{ sequence: string; at: string }[]>`
    select sequence::text, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') as at
    from outbox where aggregate_id = ${aggregateId} order by sequence`;

/**
 * The early transaction starts first and waits; the late one enqueues and commits; then the early
 * one enqueues (sequence 2) with `write`.
 */
async function lateEnqueueInEarlyTransaction(aggregateId: string, write: typeof enqueue): Promise<void> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let started!: () => void;
  const begun = new Promise<void>((resolve) => {
    started = resolve;
  });
  const early = db.sql.begin(async (tx) => {
    await tx`select now()`; // the transaction's start, which now() returns for its whole life
    started();
    await released;
    await write(tx, event(aggregateId, 2));
  });
  await begun;
  await new Promise((resolve) => setTimeout(resolve, 50));
  await db.sql.begin((tx) => enqueue(tx, event(aggregateId, 1)));
  release();
  await early;
}

describe('occurredAt', () => {
  it('never goes back as sequence grows within an aggregate (one event, no key)', async () => {
    await lateEnqueueInEarlyTransaction('t-1', enqueue);
    const rows = await rowsOf('t-1');
    expect(rows.map((r) => r.sequence)).toEqual(['1', '2']);
    expect(
      rows.map((r) => r.at),
      JSON.stringify(rows),
    ).toEqual(rows.map((r) => r.at).sort());
  });

  it('never goes back as sequence grows within an aggregate (many events, and a key)', async () => {
    await lateEnqueueInEarlyTransaction('t-2', (tx, e) =>
      enqueueMany(tx, [e, { ...e, payload: { n: 3 } }]).then((r) => r[0] as EnqueueResult),
    );
    await lateEnqueueInEarlyTransaction('t-3', (tx, e) => enqueue(tx, { ...e, idempotencyKey: 'time-key' }));
    for (const aggregateId of ['t-2', 't-3']) {
      const rows = await rowsOf(aggregateId);
      const times = rows.map((r) => r.at);
      expect(times, aggregateId).toEqual([...times].sort());
      expect(rows.length, aggregateId).toBe(aggregateId === 't-2' ? 3 : 2);
    }
  });

  it('is the moment of the enqueue, not of its transaction start', async () => {
    const [row] = await db.sql.begin(async (tx) => {
      await tx`select pg_sleep(0.2)`;
      await enqueue(tx, event('t-4', 1));
      return tx<{ waited: boolean }[]>`
        select created_at >= now() + interval '200 milliseconds' as waited from outbox where aggregate_id = 't-4'`;
    });
    expect(row?.waited).toBe(true);
  });
});
