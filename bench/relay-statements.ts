/**
 * Where the relay's database time goes, statement by statement (issue 20): the db-cost section's
 * relay phase (20,000 events over 5,000 aggregates, `runRelay({ untilEmpty: true })` at the
 * default settings, the local bus with no latency) on a private cluster with `pg_stat_statements`,
 * printing per kind of statement the calls per 1,000 events, server time (execution and planning)
 * per event, and the cluster's CPU per event over the phase (bench/support/pg-cost.ts).
 *
 * `npm run bench:statements -- [repeats]` (default 1). `EXPLAIN=<ms>` also writes the plan, with
 * actual rows, time and buffers, of every statement slower than that to /tmp/relay-explain.log
 * (auto_explain); `ANALYZE=1` analyzes the outbox before the relay phase (the db-cost section does
 * not, so its claims are planned without the table's statistics).
 *
 * Server time is wall time inside the server (CPU, and waits for locks or a CPU on a busy machine),
 * so it adds up to more than the cluster's CPU; read it for the shares.
 */
import { appendFileSync } from 'node:fs';
import { runRelay } from '../shared/relay/index.ts';
import { enqueueThroughFunction, openDbCostRig } from './sections/db-cost.ts';

const EVENTS = 20_000;
const AGGREGATES = 5_000;
const CLIENTS = 4;
const repeats = Number(process.argv[2] ?? 1);

const rig = await openDbCostRig(CLIENTS, {
  postgresFlags: [
    '-c',
    'shared_preload_libraries=pg_stat_statements',
    '-c',
    'pg_stat_statements.track=all',
    '-c',
    'pg_stat_statements.track_planning=on',
    // EXPLAIN=<ms>: the plans of statements slower than that, with their actual rows and timing.
    ...(process.env.EXPLAIN
      ? [
          '-c',
          'session_preload_libraries=auto_explain',
          '-c',
          `auto_explain.log_min_duration=${process.env.EXPLAIN}`,
          '-c',
          'auto_explain.log_analyze=on',
          '-c',
          'auto_explain.log_buffers=on',
        ]
      : []),
  ],
  serverLog: Boolean(process.env.EXPLAIN),
  log: (line) => {
    if (process.env.EXPLAIN) appendFileSync('/tmp/relay-explain.log', `${line}\n`);
  },
});
const { sql, relaySql, probeSql, probe, client, settings } = rig;
await probeSql`create extension if not exists pg_stat_statements`;

try {
  for (let r = 0; r < repeats; r++) {
    await sql`truncate outbox.outbox, outbox.outbox_aggregate, outbox.outbox_idempotency_key restart identity`;
    await enqueueThroughFunction(sql, { events: EVENTS, aggregates: AGGREGATES, clients: CLIENTS });
    // ANALYZE=1: the relay phase with the table's statistics fresh (as autovacuum would leave them
    // on a table that has been filling for a while) rather than those of the empty table.
    if (process.env.ANALYZE) await probeSql`analyze outbox`;
    await probeSql`checkpoint`;
    await probeSql`select pg_stat_statements_reset()`;
    const [tBefore] = await probeSql<{ upd: string; hot: string }[]>`
      select n_tup_upd::text as upd, n_tup_hot_upd::text as hot from pg_stat_user_tables where relname = 'outbox'`;
    const before = await probe.read();
    const t0 = performance.now();
    const result = await runRelay({ sql: relaySql, client, settings, untilEmpty: true });
    const wallMs = performance.now() - t0;
    const cost = await probe.since(before);
    await probeSql`select pg_stat_force_next_flush()`;
    await new Promise((r) => setTimeout(r, 1200));
    const [tAfter] = await probeSql<{ upd: string; hot: string }[]>`
      select n_tup_upd::text as upd, n_tup_hot_upd::text as hot from pg_stat_user_tables where relname = 'outbox'`;
    const rows = await probeSql<
      { query: string; calls: string; exec_ms: number; plan_ms: number; rows: string; plans: string }[]
    >`
      select query, calls::text, total_exec_time as exec_ms, total_plan_time as plan_ms, rows::text, plans::text
      from pg_stat_statements
      where dbid = (select oid from pg_database where datname = 'db_cost')
        and query not like '%pg_stat%' and query not ilike 'checkpoint%'
        and query not like '%pg_current_wal_lsn%' and query not like '%pg_wal_lsn_diff%'
      order by total_exec_time + total_plan_time desc`;
    console.log(
      `\nrun ${r + 1}: published ${result.published} in ${result.passes} passes, ${Math.round(wallMs)} ms; cluster CPU ${(cost.cpuUs / EVENTS).toFixed(1)} µs/event, WAL ${Math.round(cost.walBytes / EVENTS)} B/event; outbox updates ${Number(tAfter?.upd) - Number(tBefore?.upd)} (HOT ${Number(tAfter?.hot) - Number(tBefore?.hot)})`,
    );
    let calls = 0;
    let total = 0;
    for (const row of rows) {
      calls += Number(row.calls);
      total += row.exec_ms + row.plan_ms;
    }
    console.log(
      `statements: ${((calls * 1000) / EVENTS).toFixed(1)} per 1,000 events; server time ${((total * 1000) / EVENTS).toFixed(1)} µs/event`,
    );
    console.log('calls/1k events | exec µs/event | plan µs/event | µs/call | rows/call | plans | statement');
    for (const row of rows) {
      const n = Number(row.calls);
      console.log(
        `${((n * 1000) / EVENTS).toFixed(1).padStart(7)} | ${((row.exec_ms * 1000) / EVENTS).toFixed(2).padStart(6)} | ${((row.plan_ms * 1000) / EVENTS).toFixed(2).padStart(6)} | ${(((row.exec_ms + row.plan_ms) * 1000) / n).toFixed(0).padStart(6)} | ${(Number(row.rows) / n).toFixed(1).padStart(6)} | ${row.plans.padStart(5)} | ${row.query.replace(/\s+/g, ' ').slice(0, 110)}`,
      );
    }
  }
} finally {
  await rig.close();
}
