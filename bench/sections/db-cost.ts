/**
 * Bench section `db-cost` (issue 20): what the outbox costs the user's database per event — WAL
 * bytes and the server's CPU time — for enqueue, relay and prune, this project beside the plain
 * design (bench/plain-outbox.ts), and enqueue latency beside the plain insert.
 *
 * On a private cluster of its own (embedded Postgres at the server's defaults but fsync, as the
 * bench's other clusters), so that WAL and CPU are this section's alone (bench/support/pg-cost.ts).
 * Per repeat and design, on empty tables: `events` events over `aggregates` aggregates, each
 * enqueued in its own transaction from `clients` clients (ours through `outbox_enqueue`, the SQL
 * entry point every producer path shares); the relay drained to the local bus with no latency
 * (ours: `runRelay` at the default settings; plain: claim, PutEvents, mark in one transaction, two
 * loops as our two lanes); then prune with a retention of 0 s (every published row is past it,
 * as after back-dating, without an UPDATE that would itself change the table). Each phase starts
 * after a CHECKPOINT. The designs alternate; figures are medians over the repeats.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';
import {
  connect,
  loadRelaySettings,
  migrate,
  type RelaySettings,
  type Sql,
} from '../../shared/platform/index.ts';
import { createEventBridgeClient, RELAY_PLAN_CACHE_MODE, runRelay } from '../../shared/relay/index.ts';
import { prune } from '../../shared/relay/operations/index.ts';
import { plainEnqueue, plainPrune, plainRelayDrain, setUpPlainOutbox } from '../plain-outbox.ts';
import { type PgCost, PgCostProbe, type WalRecordKind } from '../support/pg-cost.ts';
import { median, startBusProcess } from '../support/processes.ts';

/** Knobs of the section. */
export interface DbCostOptions {
  events: number;
  aggregates: number;
  clients: number;
  repeats: number;
}

/** Per-event figures of one design (medians over the repeats). */
export interface DbCostFigures {
  enqueueWalBytes: number;
  enqueueCpuUs: number;
  relayWalBytes: number;
  relayCpuUs: number;
  pruneWalBytes: number;
  pruneCpuUs: number;
  lifetimeWalBytes: number;
  lifetimeCpuUs: number;
  /** One enqueue transaction (BEGIN, the statement, COMMIT) as the client sees it, ms. */
  enqueueP50Ms: number;
  enqueueP99Ms: number;
}

/** Where one phase's WAL went, per event, by record kind (one run's, not a median). */
export interface WalBreakdown {
  projectEnqueue: WalRecordKind[];
  plainEnqueue: WalRecordKind[];
  projectRelay: WalRecordKind[];
  plainRelay: WalRecordKind[];
}

/** The section's result. */
export interface DbCostResult {
  project: DbCostFigures;
  plain: DbCostFigures;
  /** From the last run of each design. */
  wal: WalBreakdown;
  postgres: string;
}

/** What a section needs of the bench: a progress line, and a markdown table for the report. */
export interface SectionContext {
  log: (line: string) => void;
  report: (markdown: string) => void;
}

type Phases = {
  enqueue: PgCost;
  relay: PgCost;
  prune: PgCost;
  latenciesMs: number[];
  /** Read right after each phase, before the next CHECKPOINT recycles its WAL. */
  enqueueWal: WalRecordKind[];
  relayWal: WalRecordKind[];
};

const TYPES = ['OrderPlaced', 'OrderPaid', 'OrderShipped'];
/** The i-th event of the section: three types in turn, aggregate i mod `aggregates`, a small order payload. */
export const benchEvent = (i: number, aggregates: number) => ({
  type: TYPES[i % TYPES.length] as string,
  source: 'bench.orders',
  aggregateId: String(i % aggregates),
  payload: {
    orderId: String(i % aggregates),
    total: 120.5,
    currency: 'EUR',
    lines: [{ sku: 'A-1', qty: 2 }],
  },
});

/** Runs `work(i)` for i in [0, n) from `clients` concurrent loops; returns each call's latency, ms. */
export async function fromClients(
  n: number,
  clients: number,
  work: (i: number) => Promise<void>,
): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      for (let i = next++; i < n; i = next++) {
        const t0 = performance.now();
        await work(i);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  return latencies;
}

/** What the section (and bench/relay-statements.ts) measures on: a private cluster and its clients. */
export interface DbCostRig {
  cluster: { url: string };
  /** Connection string of the migrated database, `db_cost`. */
  url: string;
  /** Pool for the work: `clients` + 4 connections. */
  sql: Sql;
  /** The relay's pool, opened as `createRelay` opens its own (`RELAY_PLAN_CACHE_MODE`): 5 connections. */
  relaySql: Sql;
  /** One connection of its own for the probe's readings. */
  probeSql: Sql;
  probe: PgCostProbe;
  bus: Awaited<ReturnType<typeof startBusProcess>>;
  settings: RelaySettings;
  client: EventBridgeClient;
  close(): Promise<void>;
}

/**
 * Starts a private cluster (embedded Postgres, with `clusterOptions`: extra server flags, its
 * log), creates and migrates database `db_cost`, and opens the pools, the cost probe, and the
 * local bus.
 */
export async function openDbCostRig(
  clients: number,
  clusterOptions: Parameters<typeof startEmbeddedPostgres>[0] = {},
): Promise<DbCostRig> {
  const cluster = await startEmbeddedPostgres(clusterOptions);
  const admin = postgres(cluster.url, { max: 1, onnotice: () => {} });
  await admin.unsafe('create database db_cost');
  await admin.end();
  const url = new URL(cluster.url);
  url.pathname = '/db_cost';
  await migrate(url.toString(), { log: () => {} });
  const sql = connect({ url: url.toString(), max: clients + 4, env: {} });
  const relaySql = connect({
    url: url.toString(),
    max: 5,
    env: {},
    planCacheMode: RELAY_PLAN_CACHE_MODE,
  });
  const probeSql = connect({ url: url.toString(), max: 1, env: {} });
  const probe = await PgCostProbe.open(probeSql);
  const bus = await startBusProcess();
  const settings = loadRelaySettings({ EVENT_BUS_NAME: 'db-cost-bus' });
  const client = createEventBridgeClient({
    endpoint: bus.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  return {
    cluster,
    url: url.toString(),
    sql,
    relaySql,
    probeSql,
    probe,
    bus,
    settings,
    client,
    close: async () => {
      await sql.end();
      await relaySql.end();
      await probeSql.end();
      await bus.close();
      await cluster.stop();
    },
  };
}

/**
 * Enqueues `events` events over `aggregates` aggregates, each in its own transaction through
 * `outbox_enqueue`, from `clients` concurrent loops.
 * @returns each transaction's latency as the client saw it, ms
 */
export function enqueueThroughFunction(
  sql: Sql,
  o: { events: number; aggregates: number; clients: number },
): Promise<number[]> {
  return fromClients(o.events, o.clients, async (i) => {
    const e = benchEvent(i, o.aggregates);
    await sql.begin(
      (tx) => tx`
        select event_id, sequence, duplicate from outbox_enqueue(
          event_type => ${e.type}, source => ${e.source}, aggregate_type => 'order',
          aggregate_id => ${e.aggregateId}, payload => ${tx.json(e.payload)})`,
    );
  });
}

/** Runs the section on a cluster of its own and reports its table. */
export async function dbCost(ctx: SectionContext, o: DbCostOptions): Promise<DbCostResult> {
  const rig = await openDbCostRig(o.clients);
  const { sql, relaySql, probe, bus, settings, client } = rig;
  try {
    const [v] = await sql<{ v: string }[]>`select current_setting('server_version') as v`;

    const ours = async (): Promise<Phases> => {
      await sql`truncate outbox, outbox_aggregate, outbox_idempotency_key restart identity`;
      let latenciesMs: number[] = [];
      const enqueue = await probe.measure(async () => {
        latenciesMs = await enqueueThroughFunction(sql, o);
      });
      const enqueueWal = await probe.walRecords(enqueue.cost);
      const relay = await probe.measure(() =>
        runRelay({ sql: relaySql, client, settings, untilEmpty: true }),
      );
      const relayWal = await probe.walRecords(relay.cost);
      if (relay.result.published !== o.events)
        throw new Error(`db-cost: the relay published ${relay.result.published} of ${o.events}`);
      const pruned = await probe.measure(() =>
        prune(sql, {
          publishedRetentionSeconds: 0,
          deadLetterRetentionSeconds: 86_400,
          batchSize: 1_000,
          timeBudgetMs: 600_000,
        }),
      );
      if (pruned.result.publishedDeleted !== o.events)
        throw new Error(`db-cost: prune deleted ${pruned.result.publishedDeleted} of ${o.events}`);
      return {
        enqueue: enqueue.cost,
        relay: relay.cost,
        prune: pruned.cost,
        latenciesMs,
        enqueueWal,
        relayWal,
      };
    };

    const plain = async (): Promise<Phases> => {
      await setUpPlainOutbox(sql);
      let latenciesMs: number[] = [];
      const enqueue = await probe.measure(async () => {
        latenciesMs = await fromClients(o.events, o.clients, async (i) => {
          const e = benchEvent(i, o.aggregates);
          await sql.begin((tx) => plainEnqueue(tx, { ...e, dedupKey: randomUUID() }));
        });
      });
      const enqueueWal = await probe.walRecords(enqueue.cost);
      const relay = await probe.measure(async () => {
        const drained = await Promise.all([1, 2].map(() => plainRelayDrain(sql, client, 'db-cost-bus')));
        return drained.reduce((a, b) => a + b, 0);
      });
      const relayWal = await probe.walRecords(relay.cost);
      if (relay.result !== o.events)
        throw new Error(`db-cost: the plain relay published ${relay.result} of ${o.events}`);
      const pruned = await probe.measure(() => plainPrune(sql, 0));
      if (pruned.result !== o.events)
        throw new Error(`db-cost: the plain prune deleted ${pruned.result} of ${o.events}`);
      return {
        enqueue: enqueue.cost,
        relay: relay.cost,
        prune: pruned.cost,
        latenciesMs,
        enqueueWal,
        relayWal,
      };
    };

    const runs: { project: Phases[]; plain: Phases[] } = { project: [], plain: [] };
    for (let r = 0; r < o.repeats; r++) {
      // Alternate which design goes first, so that neither always meets the other's leftovers
      // (autovacuum of the previous run's tables, a warmer cache).
      const order = r % 2 === 0 ? (['project', 'plain'] as const) : (['plain', 'project'] as const);
      for (const design of order) {
        const phases = design === 'project' ? await ours() : await plain();
        runs[design].push(phases);
        await bus.reset();
        ctx.log(
          `db-cost ${design} #${r + 1}: enqueue ${perEvent(phases.enqueue.walBytes, o.events)} B ${perEvent(phases.enqueue.cpuUs, o.events)} µs, relay ${perEvent(phases.relay.walBytes, o.events)} B ${perEvent(phases.relay.cpuUs, o.events)} µs, prune ${perEvent(phases.prune.walBytes, o.events)} B ${perEvent(phases.prune.cpuUs, o.events)} µs`,
        );
      }
    }
    const project = figures(runs.project, o.events);
    const plainFigures = figures(runs.plain, o.events);
    const lastProject = runs.project.at(-1) as Phases;
    const lastPlain = runs.plain.at(-1) as Phases;
    const wal: WalBreakdown = {
      projectEnqueue: lastProject.enqueueWal,
      plainEnqueue: lastPlain.enqueueWal,
      projectRelay: lastProject.relayWal,
      plainRelay: lastPlain.relayWal,
    };
    ctx.report(`${table(project, plainFigures, o, String(v?.v))}\n\n${walTable(wal, o.events)}`);
    return { project, plain: plainFigures, wal, postgres: String(v?.v) };
  } finally {
    await rig.close();
  }
}

const perEvent = (x: number, n: number) => Math.round(x / n);

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
}

function figures(runs: Phases[], n: number): DbCostFigures {
  const m = (f: (p: Phases) => number) => Math.round(median(runs.map(f)) / n);
  const ms = (f: (p: Phases) => number) => Number(median(runs.map(f)).toFixed(2));
  return {
    enqueueWalBytes: m((p) => p.enqueue.walBytes),
    enqueueCpuUs: m((p) => p.enqueue.cpuUs),
    relayWalBytes: m((p) => p.relay.walBytes),
    relayCpuUs: m((p) => p.relay.cpuUs),
    pruneWalBytes: m((p) => p.prune.walBytes),
    pruneCpuUs: m((p) => p.prune.cpuUs),
    lifetimeWalBytes: m((p) => p.enqueue.walBytes + p.relay.walBytes + p.prune.walBytes),
    lifetimeCpuUs: m((p) => p.enqueue.cpuUs + p.relay.cpuUs + p.prune.cpuUs),
    enqueueP50Ms: ms((p) => percentile(p.latenciesMs, 50)),
    enqueueP99Ms: ms((p) => percentile(p.latenciesMs, 99)),
  };
}

function table(ours: DbCostFigures, plain: DbCostFigures, o: DbCostOptions, version: string): string {
  const f = (x: number) => x.toLocaleString('en');
  const row = (label: string, a: number, b: number, unit: string, bound?: number) => {
    const ratio = a / b;
    const verdict =
      bound === undefined ? '' : ratio <= bound ? `≤ ${bound}×: met` : `≤ ${bound}×: **not met**`;
    return `| ${label} | ${f(a)} ${unit} | ${f(b)} ${unit} | ${ratio.toFixed(2)}× | ${verdict} |`;
  };
  return `### The outbox's cost in the database, per event (${f(o.events)} events, ${f(o.aggregates)} aggregates)

| per event | this project | plain design | ratio | bound |
|---|---|---|---|---|
${row('enqueue: WAL', ours.enqueueWalBytes, plain.enqueueWalBytes, 'B', 1.5)}
${row('enqueue: DB CPU', ours.enqueueCpuUs, plain.enqueueCpuUs, 'µs', 2)}
${row('relay: WAL', ours.relayWalBytes, plain.relayWalBytes, 'B')}
${row('relay: DB CPU', ours.relayCpuUs, plain.relayCpuUs, 'µs')}
${row('prune: WAL', ours.pruneWalBytes, plain.pruneWalBytes, 'B')}
${row('prune: DB CPU', ours.pruneCpuUs, plain.pruneCpuUs, 'µs')}
${row('lifetime: WAL', ours.lifetimeWalBytes, plain.lifetimeWalBytes, 'B', 1.5)}
${row('lifetime: DB CPU', ours.lifetimeCpuUs, plain.lifetimeCpuUs, 'µs', 1.5)}

| enqueue transaction (BEGIN, statement, COMMIT) | p50 | p99 |
|---|---|---|
| this project (\`outbox_enqueue\`) | ${ours.enqueueP50Ms} ms | ${ours.enqueueP99Ms} ms |
| plain design (one INSERT) | ${plain.enqueueP50Ms} ms | ${plain.enqueueP99Ms} ms |

A private Postgres ${version} cluster (embedded; autovacuum at its defaults), ${o.clients} clients, each event in its own transaction; the relay drained to the local bus with no latency; prune with 0 s retention. WAL from \`pg_current_wal_lsn()\` around each phase, after a CHECKPOINT; DB CPU is the user + system time of all the cluster's processes (/proc: backends, background workers, the postmaster's reaped children). Medians of ${o.repeats} runs, the designs alternating. The plain design (bench/plain-outbox.ts) has no per-aggregate order, lease, idempotency key or validation.`;
}

/**
 * Where the WAL goes: bytes per event by record kind, for each phase that differs between the
 * designs (prune is a DELETE in both). Kinds under 2 B per event in every column are summed in one
 * row. A HOT update (`Heap/HOT_UPDATE`) writes no index entry; `Heap2/PRUNE*` is the page pruning
 * that follows updates (dead row versions removed as pages are read).
 */
function walTable(wal: WalBreakdown, events: number): string {
  const columns = [wal.projectEnqueue, wal.plainEnqueue, wal.projectRelay, wal.plainRelay];
  const byKind = columns.map((c) => new Map(c.map((k) => [k.kind, k])));
  const kinds = [...new Set(columns.flat().map((k) => k.kind))];
  const perEventOf = (i: number, kind: string) => (byKind[i]?.get(kind)?.bytes ?? 0) / events;
  const shown = kinds
    .filter((kind) => columns.some((_, i) => perEventOf(i, kind) >= 2))
    .sort((a, b) => perEventOf(0, b) + perEventOf(2, b) - (perEventOf(0, a) + perEventOf(2, a)));
  const cell = (i: number, kind: string) => {
    const k = byKind[i]?.get(kind);
    return k ? `${Math.round(k.bytes / events)} B (${(k.count / events).toFixed(2)})` : '';
  };
  const rest = (i: number) =>
    Math.round(
      (columns[i] ?? []).filter((k) => !shown.includes(k.kind)).reduce((a, k) => a + k.bytes, 0) / events,
    );
  const total = (i: number) => Math.round((columns[i] ?? []).reduce((a, k) => a + k.bytes, 0) / events);
  return `### Where the WAL goes, per event (the last run; records per event in brackets)

| record kind | this project: enqueue | plain: enqueue | this project: relay | plain: relay |
|---|---|---|---|---|
${shown.map((kind) => `| ${kind} | ${[0, 1, 2, 3].map((i) => cell(i, kind)).join(' | ')} |`).join('\n')}
| everything else | ${[0, 1, 2, 3].map((i) => `${rest(i)} B`).join(' | ')} |
| **total** | ${[0, 1, 2, 3].map((i) => `**${total(i)} B**`).join(' | ')} |

From pg_walinspect (\`pg_get_wal_stats\`, per record kind, full-page images included). \`Btree/INSERT_LEAF\` is one index entry; \`Heap/HOT_UPDATE\` an update that wrote no index entry; \`Heap2/PRUNE*\` the pruning of dead row versions that updates leave; \`Btree/SPLIT_*\` index page splits.`;
}
