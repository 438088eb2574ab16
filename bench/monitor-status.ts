/**
 * What the monitor's backlog statements cost on a multi-million backlog (issue 31, item 12): a
 * database of its own on the server `DATABASE_URL` names, filled with `generate_series` (N pending
 * rows over N / 30 aggregates; default 3,000,000; 1,000 aggregates behind a dead letter, 10,000 rows
 * in backoff), then each statement the monitor runs every
 * minute, timed (median of 3) with its buffers (EXPLAIN ANALYZE, BUFFERS) in two states: just
 * filled (no VACUUM yet: the visibility map is empty) and after VACUUM ANALYZE.
 *
 * `DATABASE_URL=postgres://… node bench/monitor-status.ts [rows]`. Not part of `npm test`: the fill
 * takes minutes and about 2 GB. The database is dropped at the end.
 */

import { INBOX_FAILED_SETTLE_SECONDS } from '../shared/consumer/operations/index.ts';
import { connect } from '../shared/platform/db.ts';
import { measureClaimable } from '../shared/relay/operations/scale-out.ts';
import { countOutbox } from '../shared/relay/operations/sql/index.ts';
import { createBenchDatabase } from './support/database.ts';

const ROWS = Number(process.argv[2] ?? 3_000_000);
const PER_AGGREGATE = 30;
const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) throw new Error('set DATABASE_URL to a Postgres server this script may create a database on');
const name = 'outbox_bench_monitor_status';
const { url, drop } = await createBenchDatabase(serverUrl, name);
const sql = connect({ url, max: 2, env: {} });

/** One statement: median wall time of 3 runs, and the buffers of one EXPLAIN ANALYZE. */
async function measure(label: string, run: () => Promise<unknown>, explain: string): Promise<void> {
  const times: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    await run();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const plan = await sql.unsafe<{ 'QUERY PLAN': unknown }[]>(
    `explain (analyze, buffers, format json) ${explain}`,
  );
  const top = (plan[0]?.['QUERY PLAN'] as [{ Plan: Record<string, number> }] | undefined)?.[0]?.Plan ?? {};
  const pages = (top['Shared Hit Blocks'] ?? 0) + (top['Shared Read Blocks'] ?? 0);
  console.log(
    `| ${label} | ${Math.round(times[1] ?? 0)} ms | ${pages.toLocaleString('en')} pages (${Math.round((pages * 8) / 1024)} MiB) |`,
  );
}

/** The statements the monitor runs, as this checkout writes them. */
async function statements(state: string): Promise<void> {
  console.log(`\n${state}\n\n| statement | median | buffers |\n|---|---|---|`);
  await measure(
    'getStatus (countOutbox, includePublished false)',
    () => countOutbox(sql, false, INBOX_FAILED_SETTLE_SECONDS),
    STATUS_SQL,
  );
  // The scale-out count at the construct's defaults (maxRelays 4, backlogPerRelay 30,000) and at
  // the most the construct accepts with that backlog per relay (maxRelays 100), both policies.
  for (const maxRelays of [4, 100]) {
    for (const policy of ['continue', 'block'] as const) {
      const limit = (maxRelays - 1) * 30_000 + 1;
      const settings = {
        maxRelays,
        backlogPerRelay: 30_000,
        ordering: 'aggregate',
        deadLetterPolicy: policy,
      } as const;
      const block = policy === 'block';
      // countClaimable's text, for EXPLAIN: sent through the driver with its fragments inlined.
      await measure(
        `measureClaimable (maxRelays ${maxRelays}, ${policy}: up to ${limit.toLocaleString('en')} rows)`,
        () => measureClaimable(sql, settings),
        claimableSql(limit, block),
      );
    }
  }
}

/** countClaimable's statement with its fragments written out (for EXPLAIN). */
function claimableSql(limit: number, block: boolean): string {
  const heldBack = block
    ? `and (o.aggregate_type, o.aggregate_id) not in (
        select d.aggregate_type, d.aggregate_id from outbox.outbox d
        where dead_lettered_at is not null and published_at is null and d.discarded_at is null
          and d.sequence = (
            select p.sequence from outbox.outbox p
            where p.aggregate_type = d.aggregate_type and p.aggregate_id = d.aggregate_id
              and published_at is null
              and (coalesce(dead_lettered_at, published_at) is null or (true::boolean and discarded_at is null))
            order by p.sequence limit 1))`
    : '';
  return `select
      (select count(*) from (
        select from outbox.outbox o
        where published_at is null and dead_lettered_at is null
          and available_at <= now() and (lease_expires_at is null or lease_expires_at <= now()) ${heldBack}
        limit ${limit}
      ) c) as claimable,
      exists (
        select from (
          select t.last_error from outbox.outbox t
          where published_at is null and dead_lettered_at is null and t.available_at > now()
          order by t.available_at desc, t.id desc
          limit 1000
        ) f
        where f.last_error like 'ThrottlingException:%' or f.last_error like '%(HTTP 429)'
      ) as throttled`;
}

// countOutbox's statement with its fragments written out (for EXPLAIN), includePublished false.
const STATUS_SQL = `
    select p.pending, p.oldest, p.in_flight,
      (select count(*) from outbox.inbox_message where outcome in ('parked', 'replaying')) as inbox_parked,
      (select count(*) from outbox.inbox_failed
       where last_failed_at < now() - pg_catalog.make_interval(secs => 300)) as inbox_failed,
      (select count(*) from outbox.outbox
       where dead_lettered_at is not null and published_at is null and discarded_at is null) as dead,
      case when false then (select count(*) from outbox.outbox where published_at is not null) end as published
    from (
      select count(*) as pending,
             extract(epoch from now() - min(created_at))::float8 as oldest,
             count(*) filter (where lease_expires_at > now()) as in_flight
      from outbox.outbox where published_at is null and dead_lettered_at is null
    ) p`;

try {
  const t0 = performance.now();
  const chunk = 500_000;
  for (let from = 0; from < ROWS; from += chunk) {
    const to = Math.min(ROWS, from + chunk);
    await sql`
      insert into outbox.outbox (aggregate_type, aggregate_id, sequence, type_sequence, event_type, source, payload, created_at, available_at)
      select 'order', 'o' || (g / ${PER_AGGREGATE}), g % ${PER_AGGREGATE} + 1, g % ${PER_AGGREGATE} + 1,
             'OrderPlaced', 'shop.orders',
             jsonb_build_object('orderId', g, 'customer', 'c' || (g % 9973), 'total', g % 1000,
                                'lines', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (g % 511), 'qty', 1))),
             now() - make_interval(secs => ${ROWS} - g), now() - make_interval(secs => ${ROWS} - g)
      from generate_series(${from}::int8, ${to - 1}::int8) g`;
  }
  // 1,000 aggregates held back by a dead letter at their first event (29,000 rows behind them),
  // and 10,000 rows in backoff after an error of their own (the throttling scan reads 1,000).
  await sql`
    update outbox.outbox set dead_lettered_at = now(), last_error = 'InvalidArgument: bench'
    where sequence = 1 and aggregate_id in (select 'o' || g from generate_series(0, 999) g)`;
  await sql`
    update outbox.outbox set available_at = now() + interval '1 hour', last_error = 'InternalFailure: bench'
    where id in (select id from outbox.outbox where id % 300 = 7)`;
  const [size] = await sql<{ heap: string; idx: string }[]>`
    select pg_size_pretty(pg_table_size('outbox')) as heap, pg_size_pretty(pg_indexes_size('outbox')) as idx`;
  console.log(
    `${ROWS.toLocaleString('en')} pending rows over ${(ROWS / PER_AGGREGATE).toLocaleString('en')} aggregates in ${Math.round((performance.now() - t0) / 1000)} s: heap ${size?.heap}, indexes ${size?.idx}`,
  );
  await statements('Just filled (no VACUUM: the visibility map is empty)');
  await sql`vacuum analyze outbox`;
  await statements('After VACUUM ANALYZE');
} finally {
  await sql.end({ timeout: 5 });
  await drop();
}
