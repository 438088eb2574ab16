/**
 * One `outbox_enqueue_many` call of n events visits O(n) rows, whatever the planner estimates.
 *
 * The statement of migration 016's `outbox_enqueue_insert` joined its CTEs to each other (the
 * first event of each idempotency key by a correlated subquery, the fresh events to their
 * aggregates' counters, the answer to the in-call duplicates). A CTE's estimate comes from its
 * query, and unnest's (10 rows on PostgreSQL 15, the array's length on 17+) shrank through each
 * filter and group to 1–2 rows, so the planner took nested loops: every event scanned every other
 * (seen: 8,000 events with keys in 9.6 s on PostgreSQL 15, 15,000 without in 46 s on 18, where
 * 5,000 took 1.7 s and 5.7 s). The rows each plan node visited are read from auto_explain (rows
 * and rows removed by a filter, times its loops), not timed.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ max: 1 });
});
afterAll(async () => {
  await db.drop();
});

/** Rows visited by every node of the plans auto_explain logged: Σ (rows + rows removed) × loops. */
function rowsVisited(plans: string[]): number {
  let total = 0;
  for (const plan of plans) {
    let loops = 0;
    for (const line of plan.split('\n')) {
      const node = line.match(/actual rows=([\d.]+) loops=(\d+)/);
      if (node) {
        loops = Number(node[2]);
        total += Number(node[1]) * loops;
        continue;
      }
      const removed = line.match(/Rows Removed by (?:Join )?Filter: (\d+)/);
      if (removed) total += Number(removed[1]) * loops;
    }
  }
  return total;
}

/** Enqueues n events over 100 aggregates in one call and returns the plans of its statements. */
async function enqueueLogged(
  n: number,
  keyed: 'none' | 'fresh' | 'known',
): Promise<{ plans: string[]; duplicates: number }> {
  const plans: string[] = [];
  const sql = postgres(db.url, {
    max: 1,
    onnotice: (notice) => {
      if (String(notice.message).startsWith('duration:')) plans.push(String(notice.message));
    },
  });
  try {
    const keys = (offset: number) =>
      keyed === 'none' ? null : Array.from({ length: n }, (_, i) => `key-${offset + (i % (n / 2))}`);
    return await sql.begin(async (tx) => {
      if (keyed === 'known') {
        // The keys enqueued before, in another call: every event of the next call is a known duplicate.
        await tx`select count(*) from outbox_enqueue_many(
          ${Array(n).fill('Scaled')}::text[], ${Array(n).fill('test.scale')}::text[],
          ${Array(n).fill('order')}::text[], ${Array.from({ length: n }, (_, i) => `o-${i % 100}`)}::text[],
          ${Array.from({ length: n }, (_, i) => JSON.stringify({ i }))}::text[]::jsonb[], ${keys(0)}::text[])`;
      }
      await tx`load 'auto_explain'`;
      await tx`set local auto_explain.log_min_duration = 0`;
      await tx`set local auto_explain.log_nested_statements = on`;
      await tx`set local auto_explain.log_analyze = on`;
      await tx`set local auto_explain.log_timing = off`;
      await tx`set local client_min_messages = log`;
      const rows = await tx<{ duplicate: boolean }[]>`select duplicate from outbox_enqueue_many(
        ${Array(n).fill('Scaled')}::text[], ${Array(n).fill('test.scale')}::text[],
        ${Array(n).fill('order')}::text[], ${Array.from({ length: n }, (_, i) => `o-${i % 100}`)}::text[],
        ${Array.from({ length: n }, (_, i) => JSON.stringify({ i }))}::text[]::jsonb[], ${keys(0)}::text[])`;
      await tx`set local client_min_messages = notice`;
      expect(rows).toHaveLength(n);
      const duplicates = rows.filter((r: { duplicate: boolean }) => r.duplicate).length;
      // Rolled back: each case starts from the same table.
      throw Object.assign(new Error('rollback'), { result: { plans, duplicates } });
    });
  } catch (error) {
    const result = (error as { result?: { plans: string[]; duplicates: number } }).result;
    if (!result) throw error;
    return result;
  } finally {
    await sql.end();
  }
}

describe('outbox_enqueue_many at scale', () => {
  it.each([
    ['without keys', 'none', 0],
    ['with keys, each twice in the call', 'fresh', 0.5],
    ['with keys all known from an earlier call', 'known', 1],
  ] as const)('%s: 4,000 events visit at most 60 rows per event', async (_, keyed, duplicateShare) => {
    const n = 4_000;
    const { plans, duplicates } = await enqueueLogged(n, keyed);
    expect(duplicates).toBe(n * duplicateShare);
    const insert = plans.filter((p) => p.includes('outbox_idempotency_key'));
    expect(insert.length, 'the insert statement was logged').toBeGreaterThan(0);
    expect(rowsVisited(insert) / n).toBeLessThanOrEqual(60);
  });
});
