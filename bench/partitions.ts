/**
 * `npm run bench:partitions` (issue 37): would partitioning the outbox pay for itself? An
 * experiment, not a shipped layout: the outbox table as the migrations leave it is copied into a
 * range-partitioned twin (by `id`, the primary key, so the key stays unique; the unique index on
 * an aggregate's unfinished sequence becomes a plain one, since a unique index of a partitioned
 * table must hold the partition key), and two things are measured on a private cluster
 * (autovacuum off):
 *
 * - prune: WAL and time to remove one partition's worth of published rows, by the monitor's
 *   batched DELETE (`prune`) on the plain table against DETACH + DROP of the partition;
 * - claim: the relay's own claim statement (`claimBatch`, rolled back each time so every claim
 *   sees the same table) over a backlog in the newest partition, with the published history of
 *   the retention window in the older ones, against the same rows in one table: blocks read (the
 *   transaction's own statistics) and time.
 *
 * Options: --history-partitions (7: a week of daily partitions), --rows-per-partition (20,000),
 * --pending (5,000), --aggregates (1,000), --claims (30).
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../dev/embedded-postgres.ts';
import { connect, migrate } from '../shared/platform/index.ts';
import { RELAY_PLAN_CACHE_MODE } from '../shared/relay/index.ts';
import { prune } from '../shared/relay/operations/index.ts';
import { claimBatch } from '../shared/relay/sql/index.ts';
import { PgCostProbe } from './support/pg-cost.ts';
import { median } from './support/processes.ts';

const { values } = parseArgs({
  options: {
    'history-partitions': { type: 'string', default: '7' },
    'rows-per-partition': { type: 'string', default: '20000' },
    pending: { type: 'string', default: '5000' },
    aggregates: { type: 'string', default: '1000' },
    claims: { type: 'string', default: '30' },
  },
});
const historyPartitions = Number(values['history-partitions']);
const perPartition = Number(values['rows-per-partition']);
const pending = Number(values.pending);
const aggregates = Number(values.aggregates);
const claims = Number(values.claims);
const log = (line: string) => process.stderr.write(`${line}\n`);

const cluster = await startEmbeddedPostgres({ postgresFlags: ['-c', 'autovacuum=off'] });
const admin = postgres(cluster.url, { max: 1, onnotice: () => {} });
await admin.unsafe('create database parts');
await admin.end();
const url = new URL(cluster.url);
url.pathname = '/parts';
await migrate(url.toString(), { log: () => {} });
const sql = connect({ url: url.toString(), max: 4, env: {}, planCacheMode: RELAY_PLAN_CACHE_MODE });
const probe = await PgCostProbe.open(connect({ url: url.toString(), max: 1, env: {} }));

/**
 * Fills public.outbox through outbox_enqueue: the history (published, `published_at` a day per
 * partition back), then the backlog. One row per aggregate per partition-sized step, as a steady
 * stream would leave them.
 */
async function fill(): Promise<void> {
  const history = historyPartitions * perPartition;
  log(`filling: ${history} published rows, ${pending} pending over ${aggregates} aggregates`);
  const batch = 2_000;
  for (let from = 0; from < history + pending; from += batch) {
    const n = Math.min(batch, history + pending - from);
    await sql`
      select count(*) from outbox.outbox_enqueue_many(
        array_fill('OrderPlaced'::text, array[${n}::int]), array_fill('bench.orders'::text, array[${n}::int]),
        array_fill('order'::text, array[${n}::int]),
        array(select ((${from}::int + g) % ${aggregates}::int)::text from generate_series(0, ${n}::int - 1) g),
        array(select jsonb_build_object('n', ${from}::int + g, 'total', 120.5) from generate_series(0, ${n}::int - 1) g))`;
  }
  // The history: the first `history` rows published, each partition's rows a day apart.
  await sql`
    update outbox.outbox set published_at = now() - make_interval(days => (${historyPartitions}::int - ((id - 1) / ${perPartition}::int)::int))
    where id <= ${history}`;
}

/** The partitioned twin in schema `parted`: by id ranges of `perPartition`, the history's and one for the backlog. */
async function createTwin(): Promise<void> {
  await sql.unsafe(`
    create schema parted;
    create table parted.outbox (like public.outbox including defaults) partition by range (id);
    alter table parted.outbox add primary key (id);
    create index outbox_pending_idx on parted.outbox (available_at, id)
      where published_at is null and dead_lettered_at is null;
    create index outbox_unfinished_by_aggregate_idx on parted.outbox (aggregate_type, aggregate_id, sequence)
      where published_at is null;
    create index outbox_dead_lettered_idx on parted.outbox (dead_lettered_at, id) where dead_lettered_at is not null;`);
  for (let p = 0; p <= historyPartitions; p++) {
    const from = p * perPartition + 1;
    const to = p === historyPartitions ? 'maxvalue' : String((p + 1) * perPartition + 1);
    await sql.unsafe(
      `create table parted.outbox_p${p} partition of parted.outbox for values from (${from}) to (${to}) with (fillfactor = 50)`,
    );
  }
  await sql.unsafe('insert into parted.outbox select * from public.outbox');
  // As autovacuum leaves a table in the steady state: the history's dead row versions gone.
  await sql.unsafe('vacuum (analyze) public.outbox');
  await sql.unsafe('vacuum (analyze) parted.outbox');
}

interface ClaimFigures {
  blocksPerClaim: number;
  claimMs: number;
  claimed: number;
}

/** The relay's claim, rolled back each time, against `schema`'s outbox (found through search_path, as the relay finds it). */
async function measureClaims(schema: 'public' | 'parted'): Promise<ClaimFigures> {
  const ms: number[] = [];
  const blocks: number[] = [];
  let claimed = 0;
  for (let i = 0; i < claims; i++) {
    await sql
      .begin(async (tx) => {
        await tx.unsafe(`set local search_path = ${schema}, public`);
        const t0 = performance.now();
        const events = await claimBatch(tx, {
          leaseToken: randomUUID(),
          leaseSeconds: 30,
          batchSize: 100,
          perAggregateLimit: 10,
          ordering: 'aggregate',
          deadLetterPolicy: 'continue',
        });
        ms.push(performance.now() - t0);
        claimed = events.length;
        // Blocks this transaction read from the outbox's tables and indexes (its partitions').
        const [b] = await tx<{ blocks: string }[]>`
          select coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0) as blocks
          from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = ${schema} and (c.relname like 'outbox%')`;
        blocks.push(Number(b?.blocks));
        throw new Rollback();
      })
      .catch((e: unknown) => {
        if (!(e instanceof Rollback)) throw e;
      });
  }
  return { blocksPerClaim: Math.round(median(blocks)), claimMs: Number(median(ms).toFixed(2)), claimed };
}
class Rollback extends Error {}

/** WAL and time to remove the oldest partition's published rows: batched DELETE, or DETACH + DROP. */
async function measurePrune() {
  // public: the monitor's prune, with a retention that takes exactly the oldest day.
  const retentionSeconds = Math.round((historyPartitions - 0.5) * 86_400);
  const deleted = await probe.measure(() =>
    prune(sql, {
      publishedRetentionSeconds: retentionSeconds,
      deadLetterRetentionSeconds: 365 * 86_400,
      batchSize: 1_000,
      timeBudgetMs: 600_000,
    }),
  );
  const t0 = performance.now();
  const dropped = await probe.measure(async () => {
    await sql.unsafe('alter table parted.outbox detach partition parted.outbox_p0');
    await sql.unsafe('drop table parted.outbox_p0');
  });
  const dropMs = performance.now() - t0;
  return {
    rows: deleted.result.publishedDeleted,
    deleteWalPerRow: Math.round(deleted.cost.walBytes / deleted.result.publishedDeleted),
    deleteMs: deleted.result.durationMs,
    dropWalPerRow: Number((dropped.cost.walBytes / deleted.result.publishedDeleted).toFixed(2)),
    dropWalBytes: dropped.cost.walBytes,
    dropMs: Math.round(dropMs),
  };
}

try {
  await fill();
  await createTwin();
  const one = await measureClaims('public');
  const parted = await measureClaims('parted');
  const pruned = await measurePrune();
  const f = (x: number) => x.toLocaleString('en');
  process.stdout.write(`### Partitions: the claim and the prune (${historyPartitions} history partitions of ${f(perPartition)} published rows, ${f(pending)} pending over ${f(aggregates)} aggregates)

| | one table | ${historyPartitions + 1} partitions by id |
|---|---|---|
| claim: blocks read (median of ${claims}) | ${f(one.blocksPerClaim)} | ${f(parted.blocksPerClaim)} |
| claim: time, ms (median) | ${one.claimMs} | ${parted.claimMs} |
| events claimed | ${one.claimed} | ${parted.claimed} |
| prune of ${f(pruned.rows)} published rows: WAL per row | ${f(pruned.deleteWalPerRow)} B (batched DELETE) | ${pruned.dropWalPerRow} B (DETACH + DROP, ${f(pruned.dropWalBytes)} B in all) |
| prune: time, ms | ${f(pruned.deleteMs)} | ${f(pruned.dropMs)} |

A private Postgres cluster (autovacuum off); the relay's own claim statement, rolled back after each call; blocks are the transaction's \`pg_stat_get_xact_blocks_fetched\` over the outbox's tables and indexes (and partitions).
`);
} finally {
  await sql.end();
  await cluster.stop();
}
