/**
 * The relay's plans when the statistics no longer describe the outbox: the two causes of the 5M
 * soak's stalls (docs/performance.md, "Stalls in the soak, and their fixes").
 *
 * A plan kept from a small table. A connection that prepares its statements (any pool
 * straight to Postgres; behind a pooler statements are unnamed and planned at every call) gets a
 * generic plan of the claim after five calls, and Postgres keeps it until the outbox's next
 * ANALYZE. A plan priced while the table held 20 rows read the whole backlog once for every row
 * its head walk met: 227 million rows, 44 s, once 15,000 rows were pending (the first stall of the
 * 5M soak). Measured on what the relay runs: the pool `createRelay` opens, and the relay role's
 * sessions.
 *
 * Statistics taken when almost nothing was pending. Even a fresh plan found an aggregate's lowest
 * row through outbox_pending_idx when the lookup's condition implied its predicate: the whole
 * backlog read for each aggregate (the claim's head lookups, and unparkNextEvents).
 *
 * Rows read: what the statement's scans returned, as the transaction's own table statistics count
 * them (`pg_stat_get_xact_tuples_returned`).
 */
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { currentSql, type Sql } from '../../shared/platform/index.ts';
import { createRelay, type Relay } from '../../shared/relay/index.ts';
import { claimBatch, unparkNextEvents } from '../../shared/relay/sql/index.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions, testClient, testSettings } from '../support/relay.ts';
import { createTestRoles } from '../support/roles.ts';

const h = useHarness({ max: 2 });
const closing: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const close of closing) await close();
});

/** `aggregates` aggregates of `perAggregate` events each, straight into the table (no ANALYZE). */
async function seed(prefix: string, aggregates: number, perAggregate: number) {
  await h.db.sql`
    insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
    select 'item', ${prefix} || a, s, 'Changed', 'test.plan', '{}'::jsonb
    from generate_series(1, ${aggregates}) a, generate_series(1, ${perAggregate}) s`;
}

/**
 * The soak's steady state, then a backlog: 20,000 published rows and one pending (history-1)
 * when ANALYZE samples the table, so the planner expects about one pending row; then 15,000
 * pending rows over 1,500 aggregates (big-1 … big-1500), with no ANALYZE.
 * @returns a connection of its own (prepared statements, a 20 s statement timeout that ends a
 *   runaway plan), closed after the file
 */
async function staleStatisticsThenBacklog() {
  await h.db.sql`alter table outbox set (autovacuum_enabled = false)`;
  await seed('history-', 20_000, 1);
  await h.db.sql`update outbox set published_at = now() where aggregate_id <> 'history-1'`;
  await h.db.sql`vacuum analyze outbox`;
  await seed('big-', 1_500, 10);
  const sql = postgres(h.db.url, { max: 1, onnotice: () => {}, connection: { statement_timeout: 20_000 } });
  closing.push(() => sql.end({ timeout: 1 }));
  return sql;
}

/** Hands every lease back, as if each claim's relay had failed its pass. */
const releaseAll = () => h.db.sql`update outbox set lease_token = null, lease_expires_at = null`;

/** The outbox rows this transaction's scans returned: `seq_tup_read` and every index's `idx_tup_read`. */
async function countRowsRead(tx: postgres.TransactionSql) {
  const [read] = await tx<{ rows: string }[]>`
    select pg_stat_get_xact_tuples_returned('outbox'::regclass) + (
      select sum(pg_stat_get_xact_tuples_returned(indexrelid)) from pg_index
      where indrelid = 'outbox'::regclass) as rows`;
  return Number(read?.rows);
}

/** One claim on `sql`, in a transaction that then counts the outbox rows it read ({@link countRowsRead}). */
async function claimAndCount(sql: Sql) {
  return sql.begin(async (tx) => {
    const claimed = await claimBatch(tx, claimOptions(crypto.randomUUID(), { batchSize: 100 }));
    return { claimed: claimed.length, rowsRead: await countRowsRead(tx) };
  });
}

describe("the relay's plans", () => {
  it('is priced for the table as it is now, after 15,000 rows arrived on a 20-row plan', async () => {
    // the test's own ANALYZE only: autoanalyze would invalidate the plan the test is about
    await h.db.sql`alter table outbox set (autovacuum_enabled = false)`;
    // The relay's own pool (OUTBOX_DB_POOL_SIZE 1: every claim on one connection), straight to
    // Postgres, with a statement timeout that ends a runaway plan's claim (the test then fails).
    const relay: Relay = createRelay({
      url: h.db.url,
      env: { OUTBOX_DB_POOL_SIZE: '1', OUTBOX_DB_STATEMENT_TIMEOUT_MS: '20000' },
      settings: testSettings(),
      client: testClient(h.bus.url),
    });
    closing.push(() => relay.close(1));
    const sql = currentSql(relay.sql);

    await seed('small-', 20, 1);
    await h.db.sql`vacuum analyze outbox`;
    for (let i = 0; i < 8; i++) {
      expect((await claimAndCount(sql)).claimed).toBe(20);
      await releaseAll();
    }

    // (no TRUNCATE: a new relfilenode would make Postgres plan the claim again)
    await h.db.sql`delete from outbox`;
    await seed('big-', 1_500, 10);
    const { claimed, rowsRead } = await claimAndCount(sql);

    // 100 heads and their successors (perAggregateLimit 10: every event of 100 aggregates); a plan
    // for this table reads about 10,000 rows as these counters count them (the walk, each head's
    // lookup and successors, the parking range, the lookups by id), the 20-row plan 227 million
    expect(claimed).toBe(1_000);
    expect(rowsRead).toBeLessThan(20_000);
  }, 60_000);

  it('reads each head through the aggregate index when the statistics saw almost nothing pending', async () => {
    // The outbox holds the retention window's published history and a handful of pending rows
    // when autoanalyze samples it; then a backlog builds before the next ANALYZE. A fresh
    // (custom) plan of the claim then found each head from outbox_pending_idx, whose predicate
    // the lookup's condition implied, filtering the whole backlog for one aggregate's rows: 2,963
    // rows read per lookup, 700 lookups, 2.7 s per claim, until the claims ran out of time (the
    // 5M soak, 1M events in).
    const sql = await staleStatisticsThenBacklog();
    const { claimed, rowsRead } = await claimAndCount(sql);

    // history-1's one pending event (its head) and 99 aggregates of the backlog, 10 events each
    expect(claimed).toBe(991);
    expect(rowsRead).toBeLessThan(20_000);
  }, 60_000);

  it("unparks each aggregate's next event through the aggregate index when the statistics saw almost nothing pending", async () => {
    const sql = await staleStatisticsThenBacklog();
    // every event parked, as claims leave the rows they stepped over (history-1's too: the one
    // pending row the statistics saw, which is what makes outbox_pending_idx look cheapest)
    await h.db.sql`update outbox set available_at = now() + interval '1 minute' where published_at is null`;
    const aggregates = Array.from({ length: 100 }, (_, i) => ({
      aggregateType: 'item',
      aggregateId: `big-${i + 1}`,
    }));
    const rowsRead = await sql.begin(async (tx) => {
      await unparkNextEvents(tx as unknown as Sql, aggregates);
      return countRowsRead(tx);
    });

    const unparked = await h.db.sql<{ row: string }[]>`
      select aggregate_id || '#' || sequence as row from outbox
      where published_at is null and available_at <= now()`;
    expect(unparked.map((r) => r.row).sort()).toEqual(aggregates.map((a) => `${a.aggregateId}#1`).sort());
    // one lookup of a few index entries per aggregate (it read 1.5 million rows from
    // outbox_pending_idx, 15,000 per aggregate, when its condition implied that index's predicate)
    expect(rowsRead).toBeLessThan(5_000);
  }, 60_000);

  it("is planned at every call in the relay role's sessions, whatever client logs in as it", async () => {
    const roles = await createTestRoles(h.db);
    closing.push(() => roles.drop());
    // a client of the user's own, preparing statements (postgres.js's default)
    const own = postgres(roles.urlOf(roles.roles.relay), { max: 1, onnotice: () => {} });
    closing.push(() => own.end({ timeout: 1 }));
    const [setting] = await own<{ mode: string }[]>`select current_setting('plan_cache_mode') as mode`;
    expect(setting?.mode).toBe('force_custom_plan');
  });
});
