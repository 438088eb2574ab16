/**
 * Migration 014 under live producers: a producer whose call of outbox_enqueue started before the
 * migration committed (it waits on the ALTER's ACCESS EXCLUSIVE lock on outbox_aggregate) runs the
 * function body it started with, migration 011's, once the lock is released. That body bumps and
 * returns last_sequence alone, so if a producer running 014's body (which adds to sequence_offset)
 * got to the aggregate first, the old body hands out a sequence that was already given, and the
 * counter then skips one: a duplicate sequence and a gap in the aggregate's numbering. Under a
 * published earlier event the partial unique index (unfinished rows only, migration 011) does not
 * refuse the duplicate.
 *
 * Migration 014 refuses such a call with a serialization failure (40001, a trigger on
 * last_sequence), and the producer's retry runs 014's body.
 *
 * The order is made deterministic with a lock queue: X asks for SHARE ROW EXCLUSIVE on the table
 * before A's call asks for ROW EXCLUSIVE, so when the migration commits X gets the table first and
 * A waits for X's transaction, in which X enqueues with 014's body.
 */

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR } from '../../../shared/platform/migrate.ts';
import { applyMigrationFiles, createEmptyDatabase, type EmptyDatabase } from '../../support/db.ts';

let db: EmptyDatabase;
let sql: postgres.Sql;
const others: postgres.Sql[] = [];

beforeAll(async () => {
  db = await createEmptyDatabase();
  sql = db.sql;
});
afterAll(async () => {
  for (const o of others) await o.end({ timeout: 5 });
  await db.drop();
});

const session = (): postgres.Sql => {
  const s = postgres(db.url, { max: 1, onnotice: () => {} });
  others.push(s);
  return s;
};

describe('migration 014 with a producer in flight', () => {
  it('a call that waited on the migration neither repeats a sequence nor leaves a gap', async () => {
    await applyMigrationFiles(sql, '001', '013');
    for (let i = 0; i < 3; i++)
      await sql`select * from outbox_enqueue('Changed', 'shop.orders', 'order', 'hot', '{}'::jsonb)`;

    const m = await session().reserve();
    const x = await session().reserve();
    const aSql = session();
    const xPid = await waitingOnLockPid(x);
    const aPid = await waitingOnLockPid(aSql);

    // The migration's transaction holds ACCESS EXCLUSIVE on the counter table (as its ALTER does).
    await m`begin`;
    await m`lock table outbox_aggregate in access exclusive mode`;
    // X queues first, then A's enqueue (migration 011's body, the one current when it started).
    await x`begin`;
    const xLocked = x`lock table outbox_aggregate in share row exclusive mode`.execute();
    await untilWaiting(xPid);
    const aResult = aSql.begin(
      (tx) => tx<{ sequence: string }[]>`
        select sequence::text from outbox_enqueue('Changed', 'shop.orders', 'order', 'hot', '{}'::jsonb)`,
    );
    await untilWaiting(aPid);

    await m.unsafe(readFileSync(join(MIGRATIONS_DIR, '014_outbox_counter_at_end.sql'), 'utf8'));
    await m`commit`;
    m.release();

    // X, first in the queue, enqueues with 014's body; the relay has published it before X ends.
    await xLocked;
    const [xRow] = await x<{ sequence: string }[]>`
      select sequence::text from outbox_enqueue('Changed', 'shop.orders', 'order', 'hot', '{}'::jsonb)`;
    expect(xRow?.sequence).toBe('4');
    await x`update outbox set published_at = now() where aggregate_id = 'hot'`;
    await x`commit`;
    x.release();

    // A's call ran migration 011's body after the commit; it is refused as a serialization
    // failure, and its retry runs 014's.
    await expect(aResult).rejects.toMatchObject({ code: '40001' });
    const [retried] = await aSql.begin(
      (tx) => tx<{ sequence: string }[]>`
        select sequence::text from outbox_enqueue('Changed', 'shop.orders', 'order', 'hot', '{}'::jsonb)`,
    );
    const events = await sql<{ sequence: string }[]>`
      select sequence::text from outbox where aggregate_id = 'hot' order by sequence, id`;
    const [counter] = await sql<{ last: string }[]>`
      select (last_sequence + sequence_offset)::text as last from outbox_aggregate where aggregate_id = 'hot'`;
    expect({ a: retried?.sequence, events: events.map((e) => e.sequence), last: counter?.last }).toEqual({
      a: '5',
      events: ['1', '2', '3', '4', '5'],
      last: '5',
    });
  });
});

async function waitingOnLockPid(s: postgres.Sql | postgres.ReservedSql): Promise<number> {
  const [row] = await s<{ pid: number }[]>`select pg_backend_pid() as pid`;
  return row?.pid ?? -1;
}

async function untilWaiting(pid: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where pid = ${pid} and wait_event_type = 'Lock'`;
    if (row?.n === 1) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`backend ${pid} never waited on a lock`);
}
