/**
 * What the inbox's failure trace (issue 33, item 4) costs per event on the hot path: N events
 * (default 2,000) through `inbox()` against the server `DATABASE_URL` names, each applied by a
 * handler that writes one row, one after the other on a pool of one connection (as a consumer
 * Lambda runs), in two modes:
 * - `plain`: called as Lambda calls it, `(event, context)`;
 * - `signal`: called as middy calls it, with a third argument `{ signal }`: the inbox then writes
 *   an attempt trace before its transaction and removes it in the transaction's first statement.
 * The modes alternate event by event (the machine is shared); each call is timed alone, with the
 * WAL the server wrote meanwhile (pg_current_wal_insert_lsn before and after). Prints, per mode,
 * the median and p90 latency and the least and lower-quartile WAL per event.
 *
 * `DATABASE_URL=postgres://… node bench/inbox-trace.ts [events per mode]`. Not part of `npm test`.
 * The database is dropped at the end.
 */
import { randomUUID } from 'node:crypto';
import type { Context, EventBridgeEvent } from 'aws-lambda';
import { delivery } from '../dev/delivery.ts';
import { inbox } from '../shared/consumer/index.ts';
import { connect } from '../shared/platform/db.ts';
import { createBenchDatabase } from './support/database.ts';

const EVENTS = Number(process.argv[2] ?? 2_000);
const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) throw new Error('set DATABASE_URL to a Postgres server this script may create a database on');
const name = 'outbox_bench_inbox_trace';
const { url, admin, drop } = await createBenchDatabase(serverUrl, name);
const sql = connect({ url, max: 1, env: {} });
await sql`create table effect (id text primary key)`;

const context = { getRemainingTimeInMillis: () => 60_000 } as unknown as Context;
const handler = inbox({ sql, consumer: 'bench', metrics: false }, async (_event, ctx) => {
  await ctx.inbox.tx`insert into effect (id) values (${ctx.inbox.metadata.eventId})`;
});
const call = handler as unknown as (
  event: EventBridgeEvent<string, unknown>,
  context: Context,
  wrapper?: { signal: AbortSignal },
) => Promise<unknown>;

/** One new event of a new aggregate (#1), as EventBridge hands it to the function. */
const event = () =>
  delivery({ metadata: { aggregateId: randomUUID() }, data: { total: 42 } }) as EventBridgeEvent<
    string,
    unknown
  >;

const lsn = async () => {
  const [row] = await admin<{ lsn: string }[]>`select pg_current_wal_insert_lsn()::text as lsn`;
  return row?.lsn ?? '0/0';
};
const walBetween = async (before: string, after: string) => {
  const [row] = await admin<{ bytes: string }[]>`select pg_wal_lsn_diff(${after}, ${before})::text as bytes`;
  return Number(row?.bytes ?? 0);
};

const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
};

// The modes alternate event by event, so that both meet the same load; each call is timed alone,
// and its WAL read around it (the server's other databases write too: the minimum and the lower
// quartile are the event's own).
const samples = {
  plain: { ms: [] as number[], wal: [] as number[] },
  signal: { ms: [] as number[], wal: [] as number[] },
};
const signal = new AbortController().signal;
for (let i = 0; i < 200; i++) await call(event(), context, i % 2 ? { signal } : undefined); // warm-up
for (let i = 0; i < EVENTS * 2; i++) {
  const mode = i % 2 ? 'signal' : 'plain';
  const e = event();
  const before = await lsn();
  const t0 = performance.now();
  await (mode === 'signal' ? call(e, context, { signal }) : call(e, context));
  samples[mode].ms.push(performance.now() - t0);
  samples[mode].wal.push(await walBetween(before, await lsn()));
}
console.log('| mode | events | median ms | p90 ms | min WAL bytes | p25 WAL bytes |');
console.log('|---|---|---|---|---|---|');
for (const mode of ['plain', 'signal'] as const) {
  const { ms, wal } = samples[mode];
  console.log(
    `| ${mode} | ${ms.length} | ${quantile(ms, 0.5).toFixed(3)} | ${quantile(ms, 0.9).toFixed(3)} | ${Math.min(...wal)} | ${quantile(wal, 0.25)} |`,
  );
}
await sql.end({ timeout: 5 });
await drop();
