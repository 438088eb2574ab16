/**
 * Migration 011 on a database that already holds events: idempotency keys keep working across the
 * upgrade. The key rows learn their event's row id (prune looks events up by it once the unique
 * index on event_id is gone), so a key whose event is still in the outbox is never forgotten, and
 * a repeat of it is still a duplicate.
 */
import type postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prune } from '../../../shared/relay/operations/index.ts';
import { applyMigrationFiles, createEmptyDatabase, type EmptyDatabase } from '../../support/db.ts';

let db: EmptyDatabase;
let sql: postgres.Sql;

/** Applies the migration files whose number is in [from, to], as they are. */
const applyFiles = (from: string, to: string) => applyMigrationFiles(sql, from, to);

beforeAll(async () => {
  db = await createEmptyDatabase();
  sql = db.sql;
});
afterAll(() => db.drop());

describe('migration 011 on a database with events', () => {
  it('keeps every key of an event still in the outbox, and forgets only the ones whose event is gone', async () => {
    await applyFiles('001', '010');
    const enqueue = (key: string, id: string) => sql`
      select event_id::text, sequence::text, duplicate from outbox_enqueue(
        event_type => 'OrderPlaced', source => 'shop.orders', aggregate_type => 'order',
        aggregate_id => ${id}, payload => '{}'::jsonb, idempotency_key => ${key})`;
    const [kept] = await enqueue('order-1-placed', '1');
    const [gone] = await enqueue('order-2-placed', '2');
    // order 2's event was published and pruned before the upgrade; its key stays behind
    await sql`delete from outbox where aggregate_id = '2'`;

    await applyFiles('011', '011');

    const keys = await sql<{ idempotency_key: string; linked: boolean }[]>`
      select k.idempotency_key, o.id is not null as linked
      from outbox_idempotency_key k left join outbox o on o.id = k.outbox_id
      order by 1`;
    expect(keys).toEqual([
      { idempotency_key: 'order-1-placed', linked: true },
      { idempotency_key: 'order-2-placed', linked: false },
    ]);
    // Today's prune runs on today's schema: the migrations after 011 first.
    await applyFiles('012', '999');
    // every key is past its retention: only the one whose event left the outbox goes
    const r = await prune(sql as never, {
      publishedRetentionSeconds: 86_400,
      deadLetterRetentionSeconds: 86_400,
      idempotencyKeyRetentionSeconds: 0,
      batchSize: 100,
      timeBudgetMs: 10_000,
    });
    expect(r.idempotencyKeysDeleted).toBe(1);
    const [again] = await enqueue('order-1-placed', '1');
    expect(again).toEqual({ ...kept, duplicate: true });
    expect(gone?.duplicate).toBe(false);
    // a key enqueued after the upgrade records its row too
    await enqueue('order-3-placed', '3');
    const [k3] = await sql<{ linked: boolean }[]>`
      select exists (select from outbox o where o.id = k.outbox_id and o.aggregate_id = '3') as linked
      from outbox_idempotency_key k where k.idempotency_key = 'order-3-placed'`;
    expect(k3?.linked).toBe(true);
  });
});
