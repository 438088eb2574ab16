/**
 * Bench section `db-cost` (issue 20): what the outbox costs the user's database per event — WAL
 * bytes and the server's CPU time — for enqueue, relay and prune, this project beside the plain
 * design (bench/plain-outbox.ts), and enqueue latency beside the plain insert.
 *
 * On a private cluster of its own (embedded Postgres at the server's defaults but fsync and
 * autovacuum, see below), so that WAL and CPU are this section's alone (bench/support/pg-cost.ts).
 * Three designs: ours at the defaults, ours with no published history
 * (`OUTBOX_PUBLISHED_RETENTION_DAYS=0`: the relay deletes each row as it publishes it), and the
 * plain design. Per repeat and design, on empty tables, two ways:
 * - in phases: `events` events over `aggregates` aggregates, each enqueued in its own transaction
 *   from `clients` clients (ours through `outbox_enqueue`, the SQL entry point every producer path
 *   shares); the relay drained to the local bus with no latency (ours: `runRelay` at the default
 *   settings; plain: claim, PutEvents, mark in one transaction, two loops as our two lanes); then
 *   prune with a retention of 0 s (every published row is past it, as after back-dating, without
 *   an UPDATE that would itself change the table). Each phase starts after a CHECKPOINT. The
 *   "lifetime" figures and the guards are these phases' sum;
 * - as deployed: the relay polling (ours at its 200 ms, the plain loops draining then waiting as
 *   long) while the producers enqueue, one CHECKPOINT before both; then the prune after a
 *   CHECKPOINT (a retention later, in another checkpoint cycle); then, after another, the VACUUM
 *   that autovacuum would run for the dead rows each design leaves.
 * The designs take turns to go first; figures are medians over the repeats. Every event is
 * counted on the bus (distinct event ids), since with no history the rows are gone.
 *
 * The guards ({@link DB_COST_GUARDS}, issue 37): the section sets a failing exit code when one of
 * our figures passes its bound as a multiple of the plain design's.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
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
import type { PublishedHistory } from '../../shared/relay/sql/index.ts';
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
  /** As deployed (the relay beside the producers, then the prune a checkpoint later): WAL, B per event. */
  deployedWalBytes: number;
  /** The same, and then the VACUUM of the dead rows: WAL, B per event. */
  deployedVacuumWalBytes: number;
  /** As deployed: the server's CPU, µs per event. */
  deployedCpuUs: number;
  /** One enqueue transaction (BEGIN, the statement, COMMIT) as the client sees it, ms. */
  enqueueP50Ms: number;
  enqueueP99Ms: number;
}

/** Where one phase's WAL went, per event, by record kind (one run's, not a median). */
export interface WalBreakdown {
  projectEnqueue: WalRecordKind[];
  plainEnqueue: WalRecordKind[];
  projectRelay: WalRecordKind[];
  /** The relay with no published history (its enqueue is the project's). */
  noHistoryRelay: WalRecordKind[];
  plainRelay: WalRecordKind[];
}

/** The designs measured: ours at the defaults, ours with OUTBOX_PUBLISHED_RETENTION_DAYS=0, the plain one. */
type Design = 'project' | 'noHistory' | 'plain';

/**
 * A bound on one of our figures as a multiple of the plain design's (issue 37): the bench exits
 * non-zero when one is not met. At the defaults, the floor measured for the guarantees we keep
 * (per-aggregate sequence in commit order, per-type counts, validation in the database, leases);
 * with no published history, the plain design's lifetime WAL itself.
 */
export interface DbCostGuard {
  name: string;
  ratio: number;
  bound: number;
  met: boolean;
}

/** The guards: figure of ours (which design, which figure) ≤ bound × the plain design's. */
export const DB_COST_GUARDS: readonly {
  name: string;
  design: 'project' | 'noHistory';
  figure: keyof DbCostFigures;
  bound: number;
}[] = [
  { name: 'lifetime WAL, defaults', design: 'project', figure: 'lifetimeWalBytes', bound: 1.5 },
  { name: 'lifetime DB CPU, defaults', design: 'project', figure: 'lifetimeCpuUs', bound: 2.4 },
  { name: 'enqueue WAL, defaults', design: 'project', figure: 'enqueueWalBytes', bound: 1.9 },
  { name: 'enqueue DB CPU, defaults', design: 'project', figure: 'enqueueCpuUs', bound: 2.4 },
  { name: 'lifetime WAL, no published history', design: 'noHistory', figure: 'lifetimeWalBytes', bound: 1.0 },
];

function checkGuards(project: DbCostFigures, noHistory: DbCostFigures, plain: DbCostFigures): DbCostGuard[] {
  return DB_COST_GUARDS.map((g) => {
    const ratio = (g.design === 'project' ? project : noHistory)[g.figure] / plain[g.figure];
    return { name: g.name, ratio, bound: g.bound, met: ratio <= g.bound };
  });
}

function guardTable(guards: DbCostGuard[]): string {
  return `### The guards (ours ÷ the plain design's; the bench exits 1 when one is not met)

| guard | ratio | bound | |
|---|---|---|---|
${guards.map((g) => `| ${g.name} | ${g.ratio.toFixed(2)}× | ≤ ${g.bound}× | ${g.met ? 'met' : '**not met**'} |`).join('\n')}`;
}

/** The section's result. */
export interface DbCostResult {
  project: DbCostFigures;
  /** Ours with OUTBOX_PUBLISHED_RETENTION_DAYS=0: published rows deleted by the relay. */
  noHistory: DbCostFigures;
  plain: DbCostFigures;
  guards: DbCostGuard[];
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
  /**
   * As deployed: the relay polling while the producers enqueue (one CHECKPOINT before both, as the
   * relay publishes within a second of a commit and checkpoints come minutes apart), until every
   * event is published; then, after a CHECKPOINT (a retention later), the prune.
   */
  deployed: PgCost;
  deployedPrune: PgCost;
  /** Then, after another CHECKPOINT, the VACUUM that autovacuum would run: the dead rows' last cost. */
  deployedVacuum: PgCost;
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
        select event_id, sequence, duplicate from outbox.outbox_enqueue(
          event_type => ${e.type}, source => ${e.source}, aggregate_type => 'order',
          aggregate_id => ${e.aggregateId}, payload => ${tx.json(e.payload)})`,
    );
  });
}

/** Runs the section on a cluster of its own and reports its table. */
export async function dbCost(ctx: SectionContext, o: DbCostOptions): Promise<DbCostResult> {
  // Autovacuum off on this private cluster: an autovacuum (the insert threshold fires on a table of
  // 20,000 new rows) or autoanalyze landing inside a phase or not moved its WAL by ±5 % from run to
  // run. The dead rows' cleanup is measured instead, as an explicit VACUUM of each design's tables
  // in the as-deployed lifetime.
  const rig = await openDbCostRig(o.clients, { postgresFlags: ['-c', 'autovacuum=off'] });
  const { sql, relaySql, probe, bus, settings, client } = rig;
  try {
    const [v] = await sql<{ v: string }[]>`select current_setting('server_version') as v`;

    // Ours at the defaults (`keep`: published rows kept, then pruned), and with no published
    // history (`delete`: OUTBOX_PUBLISHED_RETENTION_DAYS=0, the relay deletes each row as it is
    // published; prune then finds nothing, and its run is measured all the same).
    const ours = async (history: PublishedHistory): Promise<Phases> => {
      await sql`truncate outbox.outbox, outbox.outbox_aggregate, outbox.outbox_idempotency_key restart identity`;
      let latenciesMs: number[] = [];
      const enqueue = await probe.measure(async () => {
        latenciesMs = await enqueueThroughFunction(sql, o);
      });
      const enqueueWal = await probe.walRecords(enqueue.cost);
      const relaySettings = history === 'keep' ? settings : { ...settings, publishedRetentionDays: 0 };
      const relay = await probe.measure(() =>
        runRelay({ sql: relaySql, client, settings: relaySettings, untilEmpty: true }),
      );
      const relayWal = await probe.walRecords(relay.cost);
      if (relay.result.published !== o.events)
        throw new Error(`db-cost: the relay published ${relay.result.published} of ${o.events}`);
      // Counted on the bus, since with no history the rows are gone: every event once at least.
      const onBus = new Set((await bus.events()).map((e) => eventIdOf(e.detail)));
      if (onBus.size !== o.events)
        throw new Error(`db-cost: ${onBus.size} distinct events reached the bus, of ${o.events}`);
      const left = await sql<{ n: string }[]>`select count(*) as n from outbox.outbox`;
      const expectedLeft = history === 'keep' ? o.events : 0;
      if (Number(left[0]?.n) !== expectedLeft)
        throw new Error(
          `db-cost (${history}): ${left[0]?.n} rows left in the outbox, expected ${expectedLeft}`,
        );
      const pruned = await probe.measure(() =>
        prune(sql, {
          publishedRetentionSeconds: 0,
          deadLetterRetentionSeconds: 86_400,
          batchSize: 1_000,
          timeBudgetMs: 600_000,
        }),
      );
      if (pruned.result.publishedDeleted !== expectedLeft)
        throw new Error(`db-cost: prune deleted ${pruned.result.publishedDeleted} of ${expectedLeft}`);

      // As deployed: the relay runs (its default 200 ms poll) while the producers enqueue.
      await sql`truncate outbox.outbox, outbox.outbox_aggregate, outbox.outbox_idempotency_key restart identity`;
      await bus.reset();
      const deployed = await probe.measure(async () => {
        const stop = new AbortController();
        const relaying = runRelay({ sql: relaySql, client, settings: relaySettings, signal: stop.signal });
        await enqueueThroughFunction(sql, o);
        await untilDrained(
          () => sql<{ n: string }[]>`select count(*) as n from outbox.outbox where published_at is null`,
        );
        stop.abort();
        return relaying;
      });
      const deployedOnBus = new Set((await bus.events()).map((e) => eventIdOf(e.detail)));
      if (deployedOnBus.size !== o.events)
        throw new Error(
          `db-cost (deployed): ${deployedOnBus.size} distinct events reached the bus, of ${o.events}`,
        );
      const deployedPrune = await probe.measure(() =>
        prune(sql, {
          publishedRetentionSeconds: 0,
          deadLetterRetentionSeconds: 86_400,
          batchSize: 1_000,
          timeBudgetMs: 600_000,
        }),
      );
      if (deployedPrune.result.publishedDeleted !== expectedLeft)
        throw new Error(
          `db-cost (deployed): prune deleted ${deployedPrune.result.publishedDeleted} of ${expectedLeft}`,
        );
      const deployedVacuum = await probe.measure(() => sql`vacuum (analyze false) outbox, outbox_aggregate`);
      return {
        enqueue: enqueue.cost,
        relay: relay.cost,
        prune: pruned.cost,
        latenciesMs,
        enqueueWal,
        relayWal,
        deployed: deployed.cost,
        deployedPrune: deployedPrune.cost,
        deployedVacuum: deployedVacuum.cost,
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

      // As deployed: two relay loops (as our two lanes), each draining and then waiting our poll
      // interval, while the producers enqueue.
      await setUpPlainOutbox(sql);
      const deployed = await probe.measure(async () => {
        let stopped = false;
        const loops = [1, 2].map(async () => {
          let n = 0;
          while (!stopped) {
            const drained = await plainRelayDrain(sql, client, 'db-cost-bus');
            n += drained;
            if (drained === 0) await sleep(settings.pollIntervalMs);
          }
          return n;
        });
        await fromClients(o.events, o.clients, async (i) => {
          const e = benchEvent(i, o.aggregates);
          await sql.begin((tx) => plainEnqueue(tx, { ...e, dedupKey: randomUUID() }));
        });
        await untilDrained(
          () => sql<{ n: string }[]>`select count(*) as n from plain_outbox where published_at is null`,
        );
        stopped = true;
        return (await Promise.all(loops)).reduce((a, b) => a + b, 0);
      });
      if (deployed.result !== o.events)
        throw new Error(`db-cost (deployed): the plain relay published ${deployed.result} of ${o.events}`);
      const deployedPrune = await probe.measure(() => plainPrune(sql, 0));
      if (deployedPrune.result !== o.events)
        throw new Error(`db-cost (deployed): the plain prune deleted ${deployedPrune.result} of ${o.events}`);
      const deployedVacuum = await probe.measure(() => sql`vacuum (analyze false) plain_outbox`);
      return {
        enqueue: enqueue.cost,
        relay: relay.cost,
        prune: pruned.cost,
        latenciesMs,
        enqueueWal,
        relayWal,
        deployed: deployed.cost,
        deployedPrune: deployedPrune.cost,
        deployedVacuum: deployedVacuum.cost,
      };
    };

    const runs: Record<Design, Phases[]> = { project: [], noHistory: [], plain: [] };
    const designs: Design[] = ['project', 'noHistory', 'plain'];
    for (let r = 0; r < o.repeats; r++) {
      // Rotate which design goes first, so that none always meets another's leftovers
      // (autovacuum of the previous run's tables, a warmer cache).
      const order = designs.map((_, i) => designs[(i + r) % designs.length] as Design);
      for (const design of order) {
        const phases =
          design === 'project'
            ? await ours('keep')
            : design === 'noHistory'
              ? await ours('delete')
              : await plain();
        runs[design].push(phases);
        await bus.reset();
        ctx.log(
          `db-cost ${design} #${r + 1}: enqueue ${perEvent(phases.enqueue.walBytes, o.events)} B ${perEvent(phases.enqueue.cpuUs, o.events)} µs, relay ${perEvent(phases.relay.walBytes, o.events)} B ${perEvent(phases.relay.cpuUs, o.events)} µs, prune ${perEvent(phases.prune.walBytes, o.events)} B ${perEvent(phases.prune.cpuUs, o.events)} µs; as deployed ${perEvent(phases.deployed.walBytes, o.events)} + ${perEvent(phases.deployedPrune.walBytes, o.events)} B + vacuum ${perEvent(phases.deployedVacuum.walBytes, o.events)} B, ${perEvent(phases.deployed.cpuUs + phases.deployedPrune.cpuUs, o.events)} µs`,
        );
      }
    }
    const project = figures(runs.project, o.events);
    const noHistory = figures(runs.noHistory, o.events);
    const plainFigures = figures(runs.plain, o.events);
    const last = (design: Design) => runs[design].at(-1) as Phases;
    const wal: WalBreakdown = {
      projectEnqueue: last('project').enqueueWal,
      plainEnqueue: last('plain').enqueueWal,
      projectRelay: last('project').relayWal,
      noHistoryRelay: last('noHistory').relayWal,
      plainRelay: last('plain').relayWal,
    };
    const guards = checkGuards(project, noHistory, plainFigures);
    ctx.report(
      `${table(project, noHistory, plainFigures, o, String(v?.v))}\n\n${guardTable(guards)}\n\n${walTable(wal, o.events)}`,
    );
    for (const g of guards.filter((g) => !g.met)) {
      ctx.log(
        `db-cost: guard not met: ${g.name} is ${g.ratio.toFixed(2)}× the plain design's, bound ${g.bound}×`,
      );
      process.exitCode = 1;
    }
    return { project, noHistory, plain: plainFigures, wal, guards, postgres: String(v?.v) };
  } finally {
    await rig.close();
  }
}

const perEvent = (x: number, n: number) => Math.round(x / n);

/** Polls `count` every 50 ms until it reads 0 (every event published). */
async function untilDrained(count: () => Promise<{ n: string }[]>): Promise<void> {
  while (Number((await count())[0]?.n) > 0) await sleep(50);
}

/** The envelope's `metadata.eventId` of an accepted event's Detail. */
const eventIdOf = (detail: Record<string, unknown>) =>
  String((detail.metadata as { eventId?: unknown } | undefined)?.eventId);

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
    deployedWalBytes: m((p) => p.deployed.walBytes + p.deployedPrune.walBytes),
    deployedVacuumWalBytes: m(
      (p) => p.deployed.walBytes + p.deployedPrune.walBytes + p.deployedVacuum.walBytes,
    ),
    deployedCpuUs: m((p) => p.deployed.cpuUs + p.deployedPrune.cpuUs),
    enqueueP50Ms: ms((p) => percentile(p.latenciesMs, 50)),
    enqueueP99Ms: ms((p) => percentile(p.latenciesMs, 99)),
  };
}

function table(
  ours: DbCostFigures,
  noHistory: DbCostFigures,
  plain: DbCostFigures,
  o: DbCostOptions,
  version: string,
): string {
  const f = (x: number) => x.toLocaleString('en');
  const row = (label: string, pick: (x: DbCostFigures) => number, unit: string) => {
    const [a, n, b] = [pick(ours), pick(noHistory), pick(plain)];
    const ratio = (x: number) => (b === 0 ? '' : `${(x / b).toFixed(2)}×`);
    return `| ${label} | ${f(a)} ${unit} | ${f(n)} ${unit} | ${f(b)} ${unit} | ${ratio(a)} | ${ratio(n)} |`;
  };
  return `### The outbox's cost in the database, per event (${f(o.events)} events, ${f(o.aggregates)} aggregates)

| per event | this project (defaults) | no published history | plain design | defaults ÷ plain | no history ÷ plain |
|---|---|---|---|---|---|
${row('enqueue: WAL', (x) => x.enqueueWalBytes, 'B')}
${row('enqueue: DB CPU', (x) => x.enqueueCpuUs, 'µs')}
${row('relay: WAL', (x) => x.relayWalBytes, 'B')}
${row('relay: DB CPU', (x) => x.relayCpuUs, 'µs')}
${row('prune: WAL', (x) => x.pruneWalBytes, 'B')}
${row('prune: DB CPU', (x) => x.pruneCpuUs, 'µs')}
${row('lifetime: WAL', (x) => x.lifetimeWalBytes, 'B')}
${row('lifetime: DB CPU', (x) => x.lifetimeCpuUs, 'µs')}
${row('lifetime as deployed: WAL', (x) => x.deployedWalBytes, 'B')}
${row('lifetime as deployed, VACUUM included: WAL', (x) => x.deployedVacuumWalBytes, 'B')}
${row('lifetime as deployed: DB CPU', (x) => x.deployedCpuUs, 'µs')}

| enqueue transaction (BEGIN, statement, COMMIT) | p50 | p99 |
|---|---|---|
| this project (\`outbox_enqueue\`) | ${ours.enqueueP50Ms} ms | ${ours.enqueueP99Ms} ms |
| plain design (one INSERT) | ${plain.enqueueP50Ms} ms | ${plain.enqueueP99Ms} ms |

A private Postgres ${version} cluster (embedded; autovacuum off, so that none lands inside a phase; the as-deployed lifetime ends with an explicit VACUUM), ${o.clients} clients, each event in its own transaction; the relay drained to the local bus with no latency; prune with 0 s retention. "No published history" is this project with \`OUTBOX_PUBLISHED_RETENTION_DAYS=0\`: the relay deletes each row as it is published, and prune finds nothing (its run is measured all the same); every event is counted on the bus. WAL from \`pg_current_wal_insert_lsn()\` around each phase, after a CHECKPOINT; DB CPU is the user + system time of all the cluster's processes (/proc: backends, background workers, the postmaster's reaped children). Medians of ${o.repeats} runs, the designs taking turns to go first. The plain design (bench/plain-outbox.ts) has no per-aggregate order, lease, idempotency key or validation.`;
}

/**
 * Where the WAL goes: bytes per event by record kind, for each phase that differs between the
 * designs (prune is a DELETE in both). Kinds under 2 B per event in every column are summed in one
 * row. A HOT update (`Heap/HOT_UPDATE`) writes no index entry; `Heap2/PRUNE*` is the page pruning
 * that follows updates (dead row versions removed as pages are read).
 */
function walTable(wal: WalBreakdown, events: number): string {
  const columns = [
    wal.projectEnqueue,
    wal.plainEnqueue,
    wal.projectRelay,
    wal.noHistoryRelay,
    wal.plainRelay,
  ];
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

| record kind | this project: enqueue | plain: enqueue | this project: relay | no history: relay | plain: relay |
|---|---|---|---|---|---|
${shown.map((kind) => `| ${kind} | ${columns.map((_, i) => cell(i, kind)).join(' | ')} |`).join('\n')}
| everything else | ${columns.map((_, i) => `${rest(i)} B`).join(' | ')} |
| **total** | ${columns.map((_, i) => `**${total(i)} B**`).join(' | ')} |

From pg_walinspect (\`pg_get_wal_stats\`, per record kind, full-page images included). \`Btree/INSERT_LEAF\` is one index entry; \`Heap/HOT_UPDATE\` an update that wrote no index entry; \`Heap2/PRUNE*\` the pruning of dead row versions that updates leave; \`Btree/SPLIT_*\` index page splits.`;
}
