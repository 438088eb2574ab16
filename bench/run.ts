/**
 * `npm run bench` (quick profile) and `npm run bench -- --full`: what the relay costs where Lambda
 * bills it (CPU per event, memory of the bundled handler, bundle and cold init), its throughput
 * against the peers, and the older tables (batch × concurrency grid, lag, claim cost, producer
 * cost). Each comparison is measured side by side in one run.
 *
 * Real parts only: a real Postgres (embedded, unless DATABASE_URL is set), the local bus in a
 * process of its own (the PutEvents wire protocol, answered by test/support/local-bus.ts), the
 * real `@aws-sdk/client-eventbridge`. The relay runs as `outbox relay --until-empty`, a process of
 * its own whose CPU (`process.cpuUsage()`, user + system) and peak RSS a preload records at exit;
 * the Lambda figures come from the bundle `cdk synth` writes, run by a host that imports and
 * invokes it as Lambda's Node.js runtime does, with the heap limits the runtime sets.
 *
 * Options: `--full` (more rows and repeats, the peer tuning grid), `--scheduler-delay none` (the
 * lambda-lag section without its model of Scheduler's delays and cold starts), `--only a,b` or `--only a --only b` (run only these
 * sections: relay, rounds, peers, profile, grid, lag, claim, producer, bundle, lambda, scale,
 * lambda-lag, lambda-scale, db-cost).
 * Prints markdown tables as they are measured; writes JSON, markdown and an SVG chart to
 * bench/results/.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { OUTBOX_BUNDLING } from '../infra/outbox-relay.ts';
import { connect, loadRelaySettings, migrate, type RelaySettings } from '../shared/platform/index.ts';
import { enqueue } from '../shared/producer/index.ts';
import { claimBatch } from '../shared/relay/index.ts';
import { startEmbeddedPostgres } from '../test/support/embedded-postgres.ts';
import {
  PGTO_DEFAULTS,
  PGTO_TUNED,
  type PgtoSettings,
  seedPgTransactionalOutbox,
  setUpPgTransactionalOutbox,
} from './pg-transactional-outbox.ts';
import { dbCost } from './sections/db-cost.ts';
import { type DeployedBenchContext, lambdaLag } from './sections/lambda-lag.ts';
import { lambdaScale } from './sections/lambda-scale.ts';
import { bundleComposition, findLambdaAsset, type LambdaAsset } from './support/bundle.ts';
import { lineChart } from './support/chart.ts';
import { type CpuProfile, type ProfileRow, summariseProfile } from './support/cpu-profile.ts';
import { lambdaNodeArgs } from './support/lambda-host.ts';
import {
  type Measured,
  median,
  runMeasured,
  SCRIPTS,
  startBusProcess,
  startMeasured,
} from './support/processes.ts';
import { LAMBDA_PRICE, recommendedMemory, SIZING_MEMORY_MB, sizingRow } from './support/sizing.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({
  options: {
    full: { type: 'boolean', default: false },
    only: { type: 'string', multiple: true },
    baseline: { type: 'string' },
    /** `lambda-lag`: `model` (Scheduler 0–2 s late, one invocation 15 s late, 1 s sandbox) or `none`. */
    'scheduler-delay': { type: 'string', default: 'model' },
  },
});
const full = values.full;
/** `--baseline <checkout>`: another checkout of the project, measured beside this one. */
const baselineDir = values.baseline ? `${resolve(values.baseline)}/` : undefined;
/** `--only lag` (repeatable, or comma-separated) runs just the named sections. */
const only = values.only ? new Set(values.only.flatMap((o) => o.split(','))) : undefined;
const want = (section: string) => !only || only.has(section);
const P = {
  rows: full ? 50_000 : 20_000,
  repeats: full ? 5 : 3,
  latencies: [0, 20, 100],
  /** Rows for the 100 ms point of the chart: at the bound of 400 events/s, 20,000 would take 50 s. */
  slowRows: full ? 20_000 : 5_000,
  peerBudgetMs: full ? 20_000 : 6_000,
  pgtoGrid: full
    ? [
        PGTO_DEFAULTS,
        { batchSize: 10, pollingIntervalMs: 10, poolSize: 10 },
        { batchSize: 25, pollingIntervalMs: 10, poolSize: 25 },
        { batchSize: 40, pollingIntervalMs: 10, poolSize: 40 },
        { batchSize: 60, pollingIntervalMs: 10, poolSize: 60 },
      ]
    : [],
  grid: full
    ? { batch: [50, 100, 500], concurrency: [1, 4, 16] }
    : { batch: [100, 500], concurrency: [1, 4, 16] },
  gridRows: full ? 20_000 : 8_000,
  lagRate: 1_000,
  lagSeconds: full ? 60 : 15,
  bloatRows: full ? 1_000_000 : 300_000,
  producerTxns: full ? 5_000 : 2_000,
  lambdaRows: 100_000,
  lambdaMemory: [128, 256, 512],
  lambdaCpuRows: full ? 50_000 : 20_000,
  initRepeats: full ? 9 : 5,
  scaleRows: 100_000,
  scaleRelays: [1, 2, 4],
  lambdaLag: {
    ratePerSecond: 100,
    boundaries: full ? 5 : 3,
    busLatencyMs: 20,
    ...(values['scheduler-delay'] === 'none'
      ? { schedulerJitterMs: 0, coldStartExtraMs: 0 }
      : { schedulerJitterMs: 2_000, lateInvocation: { k: 2, ms: 15_000 }, coldStartExtraMs: 1_000 }),
    seed: 19,
  },
  lambdaScale: {
    rows: 100_000,
    relays: [1, 2, 4],
    busLatencyMs: 20,
    coldStartExtraMs: 1_000,
    drainTimeoutMs: 300_000,
  },
};
const log = (line: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);
/** 1-minute load average per core: above 1, other work competed with the bench for the CPU. */
const load = () => Number(((loadavg()[0] ?? 0) / cpus().length).toFixed(2));
const MB = (bytes: number) => Math.round(bytes / 2 ** 20);

/** The documented defaults, as a deployment without OUTBOX_* variables gets them. */
const defaults: RelaySettings = loadRelaySettings({ EVENT_BUS_NAME: 'bench-bus' });

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const serverUrl = process.env.DATABASE_URL ?? (embedded?.url as string);
const dbName = `outbox_bench_${Date.now()}`;
{
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${dbName}`);
  await admin.end();
}
const url = new URL(serverUrl);
url.pathname = `/${dbName}`;
const dbUrl = url.toString();
await migrate(dbUrl, { log: () => {} });
const sql = connect({ url: dbUrl, max: 8, env: {} });
const bus = await startBusProcess();
const busEnv = {
  DATABASE_URL: dbUrl,
  EVENT_BUS_NAME: 'bench-bus',
  AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
  AWS_REGION: 'us-east-1',
  AWS_ACCESS_KEY_ID: 'bench',
  AWS_SECRET_ACCESS_KEY: 'bench',
};
const results: Record<string, unknown> = {
  profile: full ? 'full' : 'quick',
  machine: {
    cores: cpus().length,
    cpu: cpus()[0]?.model,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    loadPerCoreAtStart: load(),
  },
};
const [serverVersion] = await sql<{ server_version: string }[]>`show server_version`;
(results.machine as Record<string, unknown>).postgres = serverVersion?.server_version;

async function reset() {
  await sql`truncate outbox, outbox_aggregate`;
  await bus.reset();
}
/**
 * Inserts `n` pending events, `perAggregate` per aggregate (sequences 1, 2, …), in bulk (not
 * through enqueue: this is setup).
 */
async function seed(n: number, prefix = '', perAggregate = 1) {
  await sql`
    insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
    select 'order', ${prefix} || ((g - 1) / ${perAggregate})::text, (g - 1) % ${perAggregate} + 1,
           'OrderPlaced', 'bench.orders', jsonb_build_object('orderId', g, 'total', g * 3)
    from generate_series(1, ${n}) g`;
  await sql`vacuum analyze outbox`;
}
const rate = (n: number, ms: number) => Math.round((n * 1000) / ms);
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0;
};
const tables: string[] = [];
const report = (table: string) => {
  tables.push(table);
  process.stdout.write(`${table}\n\n`);
};

// ---------------------------------------------------------------------------------------------
// The relay as a process: `outbox relay --until-empty`, CPU and peak RSS from the usage preload.

/**
 * The checkouts whose relay is measured: this one, and with `--baseline <dir>` another checkout
 * (its own node_modules installed), run alternately with this one so both meet the same machine.
 */
interface Checkout {
  label: string;
  dir: string;
}
const checkouts: Checkout[] = [{ label: 'this checkout', dir: root }];
if (baselineDir) {
  const head = execFileSync('git', ['-C', baselineDir, 'log', '-1', '--format=%h %s'], { encoding: 'utf8' });
  checkouts.push({ label: `baseline ${head.trim().split(' ')[0]}`, dir: baselineDir });
}

/** One `outbox relay` process over what is in the outbox. */
interface RelayRun {
  published: number;
  /** The run as the relay timed it (its summary line: connect to exit), seconds. */
  runSeconds: number;
  cpuUs: number;
  maxRssMB: number;
  wallMs: number;
}
async function runRelayProcess(
  env: Record<string, string> = {},
  nodeArgs: string[] = [],
  args = ['--until-empty'],
  dir = root,
): Promise<RelayRun> {
  const r: Measured = await runMeasured({
    nodeArgs,
    args: [`${dir}bin/outbox.js`, 'relay', ...args, '--quiet'],
    env: { ...busEnv, ...env },
    keepStdout: true,
  });
  const m = /after ([\d.]+) s: published (\d+)/.exec(r.stdout);
  if (!m) throw new Error(`unexpected relay output: ${r.stdout}`);
  return {
    published: Number(m[2]),
    runSeconds: Number(m[1]),
    cpuUs: r.usage.cpuUs,
    maxRssMB: Math.round(r.usage.maxRssKiB / 1024),
    wallMs: r.wallMs,
  };
}
/** CPU of a relay process that finds the outbox empty: start-up, one claim, exit (median of 3). */
async function relayFixedCpuUs(dir = root): Promise<number> {
  await reset();
  const runs: number[] = [];
  for (let i = 0; i < 3; i++) runs.push((await runRelayProcess({}, [], ['--until-empty'], dir)).cpuUs);
  return median(runs);
}

interface RelayFigures {
  checkout: string;
  latency: number;
  events: number;
  eventsPerSecond: number;
  /** (process CPU − CPU of a run over an empty outbox) / events, µs: the CPU the events cost. */
  cpuPerEventUs: number;
  eventsPerCpuSecond: number;
  /** Process CPU / events, µs, start-up included. */
  processCpuPerEventUs: number;
  /** CPU of a run over an empty outbox, ms. */
  fixedCpuMs: number;
  peakRssMB: number;
  runs: number;
  loadPerCore: number;
}
const relayFixedUs = new Map<string, number>();
const relayAt = new Map<number, RelayFigures>();

/** Runs each checkout's relay `repeats` times over `rows` events, alternating checkouts; medians. */
async function measureRelay(
  latency: number,
  rows: number,
  repeats: number,
  among: Checkout[] = checkouts.slice(0, 1),
  perAggregate = 1,
): Promise<RelayFigures[]> {
  await bus.setFaults({ latencyMs: latency });
  const runs = new Map<string, RelayRun[]>(among.map((c) => [c.dir, []]));
  const loadAtStart = load();
  for (let i = 0; i < repeats; i++) {
    for (const c of among) {
      await reset();
      await seed(rows, '', perAggregate);
      log(
        `relay (${c.label}): ${rows} rows (${perAggregate} per aggregate) at ${latency} ms, run ${i + 1} of ${repeats}`,
      );
      const r = await runRelayProcess({}, [], ['--until-empty'], c.dir);
      const accepted = (await bus.stats()).accepted;
      if (r.published !== rows || accepted < rows) {
        throw new Error(`relay published ${r.published} and the bus accepted ${accepted} of ${rows}`);
      }
      runs.get(c.dir)?.push(r);
    }
  }
  const loadPerCore = Number(((loadAtStart + load()) / 2).toFixed(2));
  return among.map((c) => {
    const these = runs.get(c.dir) ?? [];
    const fixed = relayFixedUs.get(c.dir) ?? 0;
    const cpu = median(these.map((r) => (r.cpuUs - fixed) / r.published));
    return {
      checkout: c.label,
      latency,
      events: rows,
      eventsPerSecond: median(these.map((r) => Math.round(r.published / r.runSeconds))),
      cpuPerEventUs: Math.round(cpu),
      eventsPerCpuSecond: Math.round(1e6 / cpu),
      processCpuPerEventUs: Math.round(median(these.map((r) => r.cpuUs / r.published))),
      fixedCpuMs: Math.round(fixed / 1000),
      peakRssMB: median(these.map((r) => r.maxRssMB)),
      runs: repeats,
      loadPerCore,
    };
  });
}

if (want('relay') || want('rounds') || want('peers') || want('profile') || want('grid')) {
  for (const c of want('relay') || want('rounds') ? checkouts : checkouts.slice(0, 1)) {
    log(`relay (${c.label}): CPU of a run over an empty outbox (start-up, one claim, exit)`);
    relayFixedUs.set(c.dir, await relayFixedCpuUs(c.dir));
  }
}
const ourFixedUs = () => relayFixedUs.get(root) ?? 0;

// 1. CPU per event, events/s and peak RSS of `outbox relay --until-empty` at the defaults.
if (want('relay')) {
  const rows: string[] = [];
  const all: RelayFigures[] = [];
  for (const latency of [0, 20]) {
    const figures = await measureRelay(latency, P.rows, P.repeats, checkouts);
    const [ours] = figures;
    if (ours) relayAt.set(latency, ours);
    all.push(...figures);
    for (const f of figures) {
      rows.push(
        `| ${latency} ms${checkouts.length > 1 ? ` | ${f.checkout}` : ''} | ${f.eventsPerSecond} | ${f.cpuPerEventUs} µs | ${f.eventsPerCpuSecond} | ${f.processCpuPerEventUs} µs | ${f.peakRssMB} MB | ${f.loadPerCore} |`,
      );
    }
  }
  results.relay = { byLatency: all };
  const checkoutColumn = checkouts.length > 1 ? ' | checkout' : '';
  report(
    `### The relay's CPU per event: \`outbox relay --until-empty\`, ${P.rows} events (one aggregate each), default settings, median of ${P.repeats}

| bus latency${checkoutColumn} | events/s | CPU per event (user + sys) | events per CPU-second | whole process per event | peak RSS | load per core |
|---|${checkouts.length > 1 ? '---|' : ''}---|---|---|---|---|---|
${rows.join('\n')}

CPU per event is the relay process's \`process.cpuUsage()\` minus that of the same command over an empty outbox (${checkouts.map((c) => `${Math.round((relayFixedUs.get(c.dir) ?? 0) / 1000)} ms`).join(' and ')}: Node start-up, loading the CLI from TypeScript sources, one claim, exit), divided by the events; "whole process" divides it all. Events/s is the relay's own run time. The CLI runs from TypeScript sources, so its RSS includes Node's type stripper (about 17 MB) and the whole CLI; the Lambda bundle's memory is measured below.${checkouts.length > 1 ? ' The checkouts ran alternately, each over a freshly seeded outbox.' : ''}`,
  );
}

// 1b. Aggregates with several events: a pass sends them in rounds, and before each round after
// the first the relay spends the successors' attempts (one statement per round).
if (want('rounds')) {
  const perAggregate = defaults.perAggregateLimit;
  const rows: string[] = [];
  const all: RelayFigures[] = [];
  for (const latency of [0, 20]) {
    const figures = await measureRelay(latency, P.rows, P.repeats, checkouts, perAggregate);
    all.push(...figures);
    for (const f of figures) {
      rows.push(
        `| ${latency} ms${checkouts.length > 1 ? ` | ${f.checkout}` : ''} | ${f.eventsPerSecond} | ${f.cpuPerEventUs} µs | ${f.processCpuPerEventUs} µs | ${f.loadPerCore} |`,
      );
    }
  }
  results.rounds = { perAggregate, byLatency: all };
  const checkoutColumn = checkouts.length > 1 ? ' | checkout' : '';
  report(
    `### Rounds: \`outbox relay --until-empty\`, ${P.rows} events, ${perAggregate} per aggregate, default settings, median of ${P.repeats}

| bus latency${checkoutColumn} | events/s | CPU per event (user + sys) | whole process per event | load per core |
|---|${checkouts.length > 1 ? '---|' : ''}---|---|---|---|
${rows.join('\n')}

Each pass claims ${defaults.batchSize} aggregates with ${perAggregate} events each and sends them in ${perAggregate} rounds, one event per aggregate per round; rounds 2 to ${perAggregate} start with one statement that spends the successors' attempts.${checkouts.length > 1 ? ' The checkouts ran alternately, each over a freshly seeded outbox.' : ''}`,
  );
}

// 2. The peers, each a process of its own, at three bus latencies.
interface PeerFigures {
  eventsPerSecond: number;
  cpuPerEventUs: number;
  published: number;
}
async function runPeer(args: string[], fixedUs: number): Promise<PeerFigures> {
  const r = await runMeasured({ args, env: busEnv, keepStdout: true });
  const out = JSON.parse(r.stdout.trim().split('\n').pop() as string) as { published: number; ms: number };
  return {
    eventsPerSecond: rate(out.published, out.ms),
    cpuPerEventUs: Math.round((r.usage.cpuUs - fixedUs) / Math.max(out.published, 1)),
    published: out.published,
  };
}
const pgtoArgs = (n: number, budget: number, s: PgtoSettings) => [
  `${root}bench/pg-transactional-outbox.ts`,
  String(n),
  String(budget),
  JSON.stringify(s),
];
const naiveArgs = (budget: number) => [`${root}bench/naive-relay.ts`, String(budget)];
const chartData: {
  latency: number;
  ours: PeerFigures;
  naive: PeerFigures;
  pgto: PeerFigures;
}[] = [];
if (want('peers')) {
  await setUpPgTransactionalOutbox(sql);
  await reset();
  await seedPgTransactionalOutbox(sql, 0);
  const fixedCpu = async (args: string[]) => {
    const runs: number[] = [];
    for (let i = 0; i < 3; i++) runs.push((await runMeasured({ args, env: busEnv })).usage.cpuUs);
    return median(runs);
  };
  const naiveFixed = await fixedCpu(naiveArgs(0));
  const pgtoFixed = await fixedCpu(pgtoArgs(0, 0, PGTO_TUNED));
  let pgto = PGTO_TUNED;
  if (P.pgtoGrid.length > 0) {
    // Tuning grid at 20 ms: pick the best throughput, as a user following the library's README would.
    await bus.setFaults({ latencyMs: 20 });
    const tried: { settings: PgtoSettings; eventsPerSecond: number }[] = [];
    for (const s of P.pgtoGrid) {
      await seedPgTransactionalOutbox(sql, P.rows);
      log(`peers: pg-transactional-outbox tuning ${JSON.stringify(s)}`);
      tried.push({
        settings: s,
        eventsPerSecond: (await runPeer(pgtoArgs(P.rows, 8_000, s), pgtoFixed)).eventsPerSecond,
      });
    }
    tried.sort((a, b) => b.eventsPerSecond - a.eventsPerSecond);
    pgto = tried[0]?.settings ?? PGTO_TUNED;
    results.pgtoTuning = tried;
    report(
      `### pg-transactional-outbox tuning at 20 ms (events/s)\n\n| batch size | polling interval | handler pool | events/s |\n|---|---|---|---|\n${tried
        .map(
          (t) =>
            `| ${t.settings.batchSize} | ${t.settings.pollingIntervalMs} ms | ${t.settings.poolSize} | ${t.eventsPerSecond} |`,
        )
        .join('\n')}`,
    );
  }
  const rows: string[] = [];
  for (const latency of P.latencies) {
    const n = latency >= 100 ? P.slowRows : P.rows;
    const ours = relayAt.get(latency) ?? ((await measureRelay(latency, n, 1))[0] as RelayFigures);
    await bus.setFaults({ latencyMs: latency });
    await reset();
    await seed(n);
    log(`peers: naive baseline at ${latency} ms (budget ${P.peerBudgetMs} ms)`);
    const naive = await runPeer(naiveArgs(P.peerBudgetMs), naiveFixed);
    await reset();
    await seedPgTransactionalOutbox(sql, n);
    log(`peers: pg-transactional-outbox at ${latency} ms (budget ${P.peerBudgetMs} ms)`);
    const p = await runPeer(pgtoArgs(n, P.peerBudgetMs, pgto), pgtoFixed);
    await seedPgTransactionalOutbox(sql, 0);
    const oursFig = {
      eventsPerSecond: ours.eventsPerSecond,
      cpuPerEventUs: ours.cpuPerEventUs,
      published: n,
    };
    chartData.push({ latency, ours: oursFig, naive, pgto: p });
    const bound = latency === 0 ? '—' : String(rate(defaults.publishConcurrency * 10, latency));
    rows.push(
      `| ${latency} ms | ${ours.eventsPerSecond} (${ours.cpuPerEventUs} µs) | ${naive.eventsPerSecond} (${naive.cpuPerEventUs} µs) | ${p.eventsPerSecond} (${p.cpuPerEventUs} µs) | ${(ours.eventsPerSecond / Math.max(naive.eventsPerSecond, 1)).toFixed(1)}× | ${(ours.eventsPerSecond / Math.max(p.eventsPerSecond, 1)).toFixed(1)}× | ${bound} |`,
    );
  }
  results.peers = { pgtoSettings: pgto, byLatency: chartData };
  report(
    `### Against the peers: events/s (CPU per event), each a process of its own

| bus latency | this relay | naive baseline | pg-transactional-outbox | vs naive | vs pg-transactional-outbox | PutEvents bound (4 × 10 × 1000 / ms) |
|---|---|---|---|---|---|---|
${rows.join('\n')}

This relay at its defaults over ${P.rows} events (${P.slowRows} at 100 ms); the peers over the same kind of backlog for up to ${P.peerBudgetMs / 1000} s each. pg-transactional-outbox's polling listener: one segment per aggregate, \`nextMessagesBatchSize\` ${pgto.batchSize}, \`nextMessagesPollingIntervalInMs\` ${pgto.pollingIntervalMs}, handler pool ${pgto.poolSize} connections (one per message in flight), one PutEvents per message; its polling function looks at the oldest message of every segment on each call, so with one aggregate per event it reads the whole backlog per poll. CPU per event excludes each process's start-up (a run over an empty table).`,
  );
  const svg = lineChart(
    'This relay against the peers',
    chartData.map((d) => `${d.latency} ms`),
    [
      {
        title: 'Throughput',
        unit: 'events/s',
        series: [
          { name: 'this relay', color: '#1f77b4', values: chartData.map((d) => d.ours.eventsPerSecond) },
          {
            name: 'pg-transactional-outbox',
            color: '#ff7f0e',
            values: chartData.map((d) => d.pgto.eventsPerSecond),
          },
          { name: 'naive baseline', color: '#7f7f7f', values: chartData.map((d) => d.naive.eventsPerSecond) },
        ],
      },
      {
        title: 'CPU per event (user + system)',
        unit: 'µs per event',
        series: [
          { name: 'this relay', color: '#1f77b4', values: chartData.map((d) => d.ours.cpuPerEventUs) },
          {
            name: 'pg-transactional-outbox',
            color: '#ff7f0e',
            values: chartData.map((d) => d.pgto.cpuPerEventUs),
          },
          { name: 'naive baseline', color: '#7f7f7f', values: chartData.map((d) => d.naive.cpuPerEventUs) },
        ],
      },
    ],
    `npm run bench (${results.profile}), ${cpus().length} cores, Node ${process.version}; local bus in its own process`,
  );
  mkdirSync(`${root}bench/results`, { recursive: true });
  writeFileSync(`${root}bench/results/chart-${results.profile}.svg`, svg);
}

// 3. Where the CPU goes: a V8 CPU profile of the relay process, idle time removed.
if (want('profile')) {
  const rows: string[] = [];
  const out: Record<string, unknown> = {};
  for (const latency of [0, 20]) {
    await bus.setFaults({ latencyMs: latency });
    await reset();
    await seed(P.rows);
    const dir = mkdtempSync(join(tmpdir(), 'outbox-prof-'));
    log(`profile: ${P.rows} rows at ${latency} ms`);
    await runRelayProcess({}, ['--cpu-prof', `--cpu-prof-dir=${dir}`, '--cpu-prof-interval=250']);
    const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile')) as string;
    const s = summariseProfile(JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile, 12);
    rmSync(dir, { recursive: true, force: true });
    // Shares of the sampled main-thread CPU, applied to the unprofiled process CPU per event
    // (profiling itself slows the process down).
    const perEvent = relayAt.get(latency)?.processCpuPerEventUs;
    out[latency] = { ...s, processCpuPerEventUs: perEvent };
    rows.push(
      `#### ${latency} ms\n\n| charged to | share of CPU | µs per event |\n|---|---|---|\n${s.chargedTo
        .slice(0, 9)
        .map(
          (r: ProfileRow) =>
            `| ${r.name} | ${(r.share * 100).toFixed(1)} % | ${perEvent ? ((r.share * perEvent) | 0).toString() : '—'} |`,
        )
        .join('\n')}\n\nHeaviest functions (self time): ${s.topFunctions
        .slice(0, 8)
        .map((r) => `${r.name} ${(r.share * 100).toFixed(1)} %`)
        .join('; ')}.`,
    );
  }
  results.cpuProfile = out;
  report(
    `### Where the relay's CPU goes (V8 CPU profile of \`outbox relay --until-empty\`, ${P.rows} events, idle samples removed)

Each sample is charged to the nearest frame up its stack that belongs to a package or to our code, so socket writes and \`JSON.stringify\` count against their caller; GC and \`(program)\` have no JavaScript stack. µs per event = share × the whole-process CPU per event measured without the profiler. Start-up (module loading) is part of the process and shows as its own rows.

${rows.join('\n\n')}`,
  );
}

// 4. Grid: batch size × PutEvents concurrency at 20 ms.
if (want('grid')) {
  await bus.setFaults({ latencyMs: 20 });
  const header = `| batch \\ concurrency | ${P.grid.concurrency.join(' | ')} |`;
  const rows = [header, `|---|${P.grid.concurrency.map(() => '---').join('|')}|`];
  const out: unknown[] = [];
  for (const batch of P.grid.batch) {
    const cells: string[] = [];
    for (const concurrency of P.grid.concurrency) {
      await reset();
      await seed(P.gridRows);
      log(`grid: batch ${batch}, concurrency ${concurrency}`);
      const r = await runRelayProcess({
        OUTBOX_BATCH_SIZE: String(batch),
        OUTBOX_PUBLISH_CONCURRENCY: String(concurrency),
      });
      const got = Math.round(r.published / r.runSeconds);
      const cpu = Math.round((r.cpuUs - ourFixedUs()) / r.published);
      const bound = rate(concurrency * 10, 20);
      cells.push(`${got} (${Math.round((got / bound) * 100)} % of ${bound}; ${cpu} µs)`);
      out.push({ batch, concurrency, eventsPerSecond: got, bound, cpuPerEventUs: cpu });
    }
    rows.push(`| ${batch} | ${cells.join(' | ')} |`);
  }
  results.grid = out;
  report(
    `### Batch size × PutEvents concurrency at 20 ms bus latency (events/s, share of the bound concurrency × 10 × 1000 / 20; CPU per event)\n\n${rows.join('\n')}`,
  );
}

// 5. Lag from commit to bus at a steady offered load, default settings.
if (want('lag')) {
  await bus.setFaults({ latencyMs: 20 });
  await reset();
  const committedAt = new Map<string, number>();
  const relay = startMeasured({
    args: [`${root}bin/outbox.js`, 'relay', '--quiet'],
    env: busEnv,
  });
  log(`lag: ${P.lagRate} events/s for ${P.lagSeconds} s`);
  const producerSql = connect({ url: dbUrl, max: 8, env: {} });
  const start = performance.now();
  let sent = 0;
  const inflight = new Set<Promise<void>>();
  while (performance.now() - start < P.lagSeconds * 1000) {
    const due = Math.floor(((performance.now() - start) / 1000) * P.lagRate);
    while (sent < due) {
      sent++;
      const p = producerSql
        .begin((tx) =>
          enqueue(tx, {
            type: 'OrderPlaced',
            source: 'bench.orders',
            aggregateType: 'order',
            aggregateId: String(sent % 5_000),
            payload: { n: sent },
          }),
        )
        .then((r) => {
          committedAt.set(r.eventId, Date.now());
        })
        .finally(() => inflight.delete(p));
      inflight.add(p);
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  await Promise.all(inflight);
  await new Promise((r) => setTimeout(r, 2_000));
  relay.child.kill('SIGINT');
  await relay.done;
  await producerSql.end();
  const lags: number[] = [];
  for (const e of await bus.events()) {
    const c = committedAt.get((e.detail as { metadata: { eventId: string } }).metadata.eventId);
    if (c !== undefined) lags.push(e.receivedAt - c);
  }
  const summary = {
    offered: sent,
    delivered: lags.length,
    p50: pct(lags, 50),
    p99: pct(lags, 99),
    max: pct(lags, 100),
  };
  results.lag = summary;
  report(
    `### Commit-to-bus lag, ${P.lagRate} events/s offered for ${P.lagSeconds} s, 20 ms bus latency, default settings (poll ${defaults.pollIntervalMs} ms)\n\n| offered | delivered | p50 | p99 | max |\n|---|---|---|---|---|\n| ${summary.offered} | ${summary.delivered} | ${summary.p50} ms | ${summary.p99} ms | ${summary.max} ms |`,
  );
}

// 6. Claim latency: empty history vs a large published history, and under a held-open transaction.
if (want('claim')) {
  await bus.setFaults({});
  const measureClaims = async (label: string) => {
    const samples: number[] = [];
    for (let i = 0; i < 60; i++) {
      const t = performance.now();
      const claimed = await claimBatch(sql, {
        leaseToken: crypto.randomUUID(),
        leaseSeconds: 60,
        batchSize: 100,
        perAggregateLimit: 10,
        ordering: 'aggregate',
        deadLetterPolicy: 'continue',
      });
      samples.push(performance.now() - t);
      await sql`update outbox set lease_token = null, lease_expires_at = null, attempts = 0 where id = any(${claimed.map((c) => c.id)}::int8[])`;
    }
    log(`claim: ${label}`);
    return { p50: Number(pct(samples, 50).toFixed(2)), p99: Number(pct(samples, 99).toFixed(2)) };
  };
  await reset();
  await seed(10_000);
  const empty = await measureClaims('no published history');
  await sql`
    insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload, published_at)
    select 'old', g::text, 1, 'OrderPlaced', 'bench.orders', '{}'::jsonb, now() - interval '1 day'
    from generate_series(1, ${P.bloatRows}) g`;
  await sql`analyze outbox`;
  const history = await measureClaims(`${P.bloatRows} published rows`);

  // A transaction held open elsewhere keeps VACUUM from removing dead tuples while rows are relayed.
  await reset();
  await seed(P.gridRows);
  const holder = postgres(dbUrl, { max: 1, onnotice: () => {} });
  let holderPid = 0;
  const held = holder
    .begin(async (tx) => {
      const [me] = await tx<
        { pid: number; xid: string }[]
      >`select pg_backend_pid() as pid, txid_current()::text as xid`;
      holderPid = me?.pid ?? 0;
      await tx`select pg_sleep(3600)`;
    })
    .catch(() => {});
  while (holderPid === 0) await new Promise((r) => setTimeout(r, 10));
  await runRelayProcess();
  await seed(10_000, 'after-');
  const bloated = await measureClaims(`after relaying ${P.gridRows} rows with a transaction held open`);
  // Cancel, not terminate: a terminated connection can crash the driver (porsager/postgres#1154).
  await sql`select pg_cancel_backend(${holderPid})`;
  await held;
  await holder.end({ timeout: 1 });
  results.claim = { empty, history, bloated, historyRows: P.bloatRows };
  report(
    `### Claim latency (100 heads, ms)\n\n| table | p50 | p99 |\n|---|---|---|\n| 10,000 pending, no history | ${empty.p50} | ${empty.p99} |\n| + ${P.bloatRows.toLocaleString('en')} published rows | ${history.p50} (${(history.p50 / empty.p50).toFixed(2)}×) | ${history.p99} |\n| after relaying ${P.gridRows} rows under a held-open transaction | ${bloated.p50} | ${bloated.p99} |`,
  );
}

// 7. Producer cost: a one-insert business transaction with and without enqueue.
if (want('producer')) {
  await reset();
  await sql`create table if not exists bench_orders (id bigint generated always as identity primary key, total int not null)`;
  const measure = async (withEnqueue: boolean) => {
    const samples: number[] = [];
    for (let i = 0; i < P.producerTxns; i++) {
      const t = performance.now();
      await sql.begin(async (tx) => {
        await tx`insert into bench_orders (total) values (${i})`;
        if (withEnqueue)
          await enqueue(tx, {
            type: 'OrderPlaced',
            source: 'bench.orders',
            aggregateType: 'order',
            aggregateId: String(i),
            payload: { total: i },
          });
      });
      samples.push(performance.now() - t);
    }
    return { p50: Number(pct(samples, 50).toFixed(3)), p99: Number(pct(samples, 99).toFixed(3)) };
  };
  await measure(false); // warm-up
  const without = await measure(false);
  const withIt = await measure(true);
  const without2 = await measure(false);
  results.producer = { without, with: withIt, withoutAgain: without2 };
  report(
    `### Producer cost, ${P.producerTxns} transactions each (ms)\n\n| business transaction | p50 | p99 |\n|---|---|---|\n| insert only | ${without.p50} | ${without.p99} |\n| insert + enqueue | ${withIt.p50} | ${withIt.p99} |\n| insert only (again) | ${without2.p50} | ${without2.p99} |\n| **enqueue adds (p50)** | **${(withIt.p50 - (without.p50 + without2.p50) / 2).toFixed(3)}** | |`,
  );
}

// ---------------------------------------------------------------------------------------------
// The deployed bundle: `cdk synth` (in each checkout), then the relay's asset from cdk.out.

/** The relay asset of each checkout, by checkout directory. */
const assets = new Map<string, LambdaAsset>();
/** The `cdk synth` output folder of each checkout, by checkout directory. */
const cdkOuts = new Map<string, string>();
if (want('bundle') || want('lambda') || want('lambda-lag') || want('lambda-scale')) {
  for (const c of checkouts) {
    log(`bundle (${c.label}): cdk synth`);
    const cdkOut = mkdtempSync(join(tmpdir(), 'outbox-cdk-'));
    execFileSync(`${c.dir}node_modules/.bin/cdk`, ['synth', '--quiet', '--output', cdkOut], {
      cwd: c.dir,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    assets.set(c.dir, findLambdaAsset(cdkOut, 'OutboxRelayDemo', 'Outbox relay:'));
    cdkOuts.set(c.dir, cdkOut);
    process.once('exit', () => rmSync(cdkOut, { recursive: true, force: true }));
  }
}
const asset = assets.get(root);

/** The relay function's environment for the host: as synthesised, with the database and bus local. */
function lambdaEnv(a: LambdaAsset, memoryMb: number, extra: Record<string, string | undefined> = {}) {
  const deployed = { ...a.environment };
  // Not here: RDS Proxy with IAM auth, and the RDS CA bundle that exists only in Lambda's image.
  for (const k of Object.keys(deployed)) if (/^PG|^OUTBOX_DB_IAM|NODE_EXTRA_CA/.test(k)) delete deployed[k];
  return {
    ...deployed,
    ...busEnv,
    LAMBDA_TASK_ROOT: a.dir,
    AWS_LAMBDA_FUNCTION_NAME: 'outbox-relay',
    AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(memoryMb),
    AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
    AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs24.x',
    TZ: 'UTC',
    ...extra,
  };
}

/** Runs the host in `init` or `init-error` mode once; returns its report and process usage. */
async function hostInit(
  a: LambdaAsset,
  mode: 'init' | 'init-error',
  memoryMb: number,
  env: Record<string, string | undefined>,
): Promise<Record<string, number> & { cpuUs: number; maxRssMB: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-host-'));
  const file = join(dir, 'host.jsonl');
  const r = await runMeasured({
    nodeArgs: lambdaNodeArgs(memoryMb),
    args: [SCRIPTS.lambdaHost],
    env: { ...lambdaEnv(a, memoryMb, env), OUTBOX_BENCH_HOST_MODE: mode, OUTBOX_BENCH_HOST_FILE: file },
  });
  const line = JSON.parse(readFileSync(file, 'utf8').trim()) as Record<string, number>;
  rmSync(dir, { recursive: true, force: true });
  return { ...line, cpuUs: r.usage.cpuUs, maxRssMB: r.usage.maxRssKiB / 1024 };
}

// 8. Bundle size, composition, cold init and what source maps cost.
if (want('bundle') && asset) {
  const composition = await bundleComposition(`${root}functions/relay/handler.ts`, OUTBOX_BUNDLING);
  const init: Record<string, Record<string, number>> = {};
  const rows: string[] = [];
  // Each checkout as deployed (its NODE_OPTIONS), and, where it ships a source map, without
  // --enable-source-maps, which shows what reading the map costs.
  const variants = checkouts.flatMap(
    (c): { name: string; a: LambdaAsset; env: Record<string, undefined> }[] => {
      const a = assets.get(c.dir) as LambdaAsset;
      const deployed = a.environment.NODE_OPTIONS ?? '';
      const name = (v: string) => `${checkouts.length > 1 ? `${c.label}: ` : ''}${v}`;
      const list = [
        {
          name: name(
            `as deployed (${(a.bundleBytes / 1024).toFixed(0)} KiB${a.mapBytes ? ` + ${(a.mapBytes / 1024).toFixed(0)} KiB map` : ', no map'}, NODE_OPTIONS=${deployed || 'none'})`,
          ),
          a,
          env: {},
        },
      ];
      if (a.mapBytes > 0 && deployed.includes('--enable-source-maps')) {
        list.push({
          name: name('the same without --enable-source-maps'),
          a,
          env: { NODE_OPTIONS: undefined },
        } as never);
      }
      return list;
    },
  );
  const samples = new Map<string, { runs: Record<string, number>[]; errors: Record<string, number>[] }>();
  for (const v of variants) samples.set(v.name, { runs: [], errors: [] });
  log(`bundle: cold init, ${variants.length} variants × ${P.initRepeats} runs, alternating`);
  for (let i = 0; i < P.initRepeats; i++) {
    for (const v of variants) {
      const s = samples.get(v.name) as { runs: Record<string, number>[]; errors: Record<string, number>[] };
      s.runs.push(await hostInit(v.a, 'init', 128, v.env));
      s.errors.push(await hostInit(v.a, 'init-error', 128, { ...v.env, EVENT_BUS_NAME: '' }));
    }
  }
  for (const v of variants) {
    const { runs, errors } = samples.get(v.name) as {
      runs: Record<string, number>[];
      errors: Record<string, number>[];
    };
    const f = {
      importMs: Math.round(median(runs.map((r) => r.importMs as number))),
      processCpuMs: Math.round(median(runs.map((r) => r.cpuUs as number)) / 1000),
      rssAfterInitMB: MB(median(runs.map((r) => r.rss as number))),
      heapAfterInitMB: MB(median(runs.map((r) => r.heapUsed as number))),
      firstStackMs: Number(median(errors.map((r) => r.firstStackMs as number)).toFixed(1)),
      againStackMs: Number(median(errors.map((r) => r.againStackMs as number)).toFixed(2)),
      rssAfterErrorMB: MB(median(errors.map((r) => r.rss as number))),
    };
    init[v.name] = f;
    rows.push(
      `| ${v.name} | ${f.importMs} ms | ${f.processCpuMs} ms | ${f.rssAfterInitMB} MB | ${f.heapAfterInitMB} MB | ${f.firstStackMs} ms | ${f.againStackMs} ms | ${f.rssAfterErrorMB} MB |`,
    );
  }
  results.bundle = {
    bundleBytes: asset.bundleBytes,
    mapBytes: asset.mapBytes,
    nodeOptions: asset.environment.NODE_OPTIONS ?? '',
    composition: composition.slice(0, 12),
    baseline: baselineDir
      ? { bundleBytes: assets.get(baselineDir)?.bundleBytes, mapBytes: assets.get(baselineDir)?.mapBytes }
      : undefined,
    init,
  };
  report(
    `### The relay bundle and its cold init (from \`cdk synth\`)

Bundle \`index.mjs\` ${(asset.bundleBytes / 1024).toFixed(0)} KiB minified${asset.mapBytes ? `, source map ${(asset.mapBytes / 1024).toFixed(0)} KiB` : ', no source map'}. Largest parts: ${composition
      .slice(0, 8)
      .map((c) => `${c.name} ${(c.bytes / 1024).toFixed(0)} KiB`)
      .join(', ')}.

| | init (import + clients) | process CPU to init | RSS after init | heap after init | first error's stack | next stack | RSS after an init error |
|---|---|---|---|---|---|---|---|
${rows.join('\n')}

Init: importing the bundle, which validates the configuration and constructs the database pool and the EventBridge client, in a process with the heap limits of a 128 MB function (median of ${P.initRepeats}, variants alternating). An init error: the bundle imported without EVENT_BUS_NAME, the configuration error's stack formatted as the runtime logs it.`,
  );
}

// 9. The bundled handler over 100,000 events at 128, 256 and 512 MB, invoked as Lambda invokes it.
const lambdaPeakRss = new Map<number, number>();
let lambdaEventsPerCpuSecond: number | undefined;
async function runLambda(a: LambdaAsset, memoryMb: number, rows: number, latency: number) {
  await bus.setFaults({ latencyMs: latency });
  await reset();
  await seed(rows);
  const dir = mkdtempSync(join(tmpdir(), 'outbox-host-'));
  const file = join(dir, 'host.jsonl');
  const { child, done } = startMeasured({
    nodeArgs: lambdaNodeArgs(memoryMb),
    args: [SCRIPTS.lambdaHost],
    sampleMs: 100,
    env: { ...lambdaEnv(a, memoryMb), OUTBOX_BENCH_HOST_FILE: file },
  });
  const progress: [number, number][] = [];
  const started = Date.now();
  let exited = false;
  void done
    .catch(() => {})
    .finally(() => {
      exited = true;
    });
  for (;;) {
    await new Promise((r) => setTimeout(r, 200));
    const accepted = (await bus.stats()).accepted;
    progress.push([Date.now(), accepted]);
    if (accepted >= rows || exited) break;
  }
  const seconds = (Date.now() - started) / 1000;
  child.kill('SIGUSR2');
  const r = await done;
  const host = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number | string>);
  rmSync(dir, { recursive: true, force: true });
  const initLine = host.find((h) => h.phase === 'init') as Record<string, number>;
  const accepted = progress[progress.length - 1]?.[1] ?? 0;
  if (accepted < rows)
    throw new Error(`the handler published ${accepted} of ${rows}: ${r.stderr.slice(-2000)}`);
  // Memory against progress: the samples taken while the backlog was still above 80 % of its
  // start, and those after it fell below 20 %.
  const acceptedAt = (t: number) => {
    let n = 0;
    for (const [pt, pa] of progress) if (pt <= t) n = pa;
    return n;
  };
  const early = r.usage.samples.filter(([t]) => {
    const n = acceptedAt(t);
    return n > 0 && n < rows * 0.2;
  });
  const late = r.usage.samples.filter(([t]) => acceptedAt(t) >= rows * 0.8);
  const peakOf = (xs: [number, number, number, number, number][], i: 1 | 2) =>
    MB(Math.max(0, ...xs.map((x) => x[i])));
  return {
    memoryMb,
    rows,
    latency,
    eventsPerSecond: Math.round(rows / seconds),
    peakRssMB: Math.round(r.usage.maxRssKiB / 1024),
    peakHeapUsedMB: MB(r.usage.peak.heapUsed),
    peakHeapTotalMB: MB(r.usage.peak.heapTotal),
    rssAfterInitMB: MB(initLine.rss as number),
    initMs: Math.round(initLine.importMs as number),
    processCpuPerEventUs: Math.round(r.usage.cpuUs / rows),
    cpuUs: r.usage.cpuUs,
    invocations: host.filter((h) => h.phase === 'invoke').length + 1,
    earlyPeakRssMB: peakOf(early, 1),
    earlyPeakHeapMB: peakOf(early, 2),
    latePeakRssMB: peakOf(late, 1),
    latePeakHeapMB: peakOf(late, 2),
  };
}
if (want('lambda') && asset) {
  const out: (Awaited<ReturnType<typeof runLambda>> & { checkout: string })[] = [];
  for (const memoryMb of P.lambdaMemory) {
    for (const c of checkouts) {
      log(`lambda (${c.label}): ${memoryMb} MB, ${P.lambdaRows} rows at 0 ms`);
      const f = await runLambda(assets.get(c.dir) as LambdaAsset, memoryMb, P.lambdaRows, 0);
      if (c.dir === root) lambdaPeakRss.set(memoryMb, f.peakRssMB);
      out.push({ ...f, checkout: c.label });
    }
  }
  // CPU per event of the bundled handler at 20 ms, for the sizing table (start-up excluded).
  log(`lambda: 256 MB, ${P.lambdaCpuRows} rows at 20 ms`);
  const cpuRun = await runLambda(asset, 256, P.lambdaCpuRows, 20);
  const initRuns: number[] = [];
  for (let i = 0; i < 3; i++) initRuns.push((await hostInit(asset, 'init', 256, {})).cpuUs);
  const initCpu = median(initRuns);
  const cpuPerEvent = (cpuRun.cpuUs - initCpu) / P.lambdaCpuRows;
  lambdaEventsPerCpuSecond = Math.round(1e6 / cpuPerEvent);
  results.lambda = { runs: out, at20ms: { ...cpuRun, cpuPerEventUs: Math.round(cpuPerEvent) } };
  const many = checkouts.length > 1;
  report(
    `### The bundled relay handler over ${P.lambdaRows.toLocaleString('en')} events, invoked as Lambda invokes it (0 ms bus latency)

| memory (heap limits as Lambda sets them)${many ? ' | checkout' : ''} | peak RSS | peak heap used / total | RSS after init | peak heap: backlog > 80 % → < 20 % | peak RSS: backlog > 80 % → < 20 % | events/s | CPU per event | invocations |
|---|${many ? '---|' : ''}---|---|---|---|---|---|---|---|
${out
  .map(
    (f) =>
      `| ${f.memoryMb} MB (${lambdaNodeArgs(f.memoryMb).slice(2).join(' ')})${many ? ` | ${f.checkout}` : ''} | **${f.peakRssMB} MB** | ${f.peakHeapUsedMB} / ${f.peakHeapTotalMB} MB | ${f.rssAfterInitMB} MB | ${f.earlyPeakHeapMB} → ${f.latePeakHeapMB} MB | ${f.earlyPeakRssMB} → ${f.latePeakRssMB} MB | ${f.eventsPerSecond} | ${f.processCpuPerEventUs} µs | ${f.invocations} |`,
  )
  .join('\n')}

The host imports \`index.mjs\` from the relay's asset in \`cdk.out\` with the function's synthesised environment (NODE_OPTIONS included), in a process started with the runtime bootstrap's flags for that memory, then invokes the handler with a scheduler-shaped event and a context whose deadline is the function's timeout (60 s), again and again as a warm container would, until the bus has every event. Peak RSS is the process's getrusage maximum; heap figures are sampled every 100 ms. Lambda's own runtime client, which shares the process, is not included (a few MB). CPU per event includes init. At 20 ms (256 MB, ${P.lambdaCpuRows} events): ${cpuRun.eventsPerSecond} events/s, ${Math.round(cpuPerEvent)} µs of CPU per event after init, ${lambdaEventsPerCpuSecond} events per CPU-second.`,
  );
}

// 10. Lambda sizing from the measured figures.
if (want('lambda') && lambdaEventsPerCpuSecond) {
  const rows = SIZING_MEMORY_MB.map((m) =>
    sizingRow(m, lambdaEventsPerCpuSecond as number, 20, defaults.publishConcurrency),
  );
  const recommended = recommendedMemory(rows, (m) => lambdaPeakRss.get(m));
  results.sizing = { eventsPerCpuSecond: lambdaEventsPerCpuSecond, price: LAMBDA_PRICE, rows, recommended };
  report(
    `### Lambda sizing at 20 ms bus latency (projected from ${lambdaEventsPerCpuSecond} events per CPU-second, the bundled handler's figure above)

| memory | CPU share | CPU bound | PutEvents bound | projected events/s | limited by | cost per million events | always-on cost per month |
|---|---|---|---|---|---|---|---|
${rows
  .map(
    (r) =>
      `| ${r.memoryMb} MB${r.memoryMb === recommended ? ' (recommended)' : ''} | ${(r.cpuShare * 100).toFixed(1)} % | ${Math.round(r.cpuBound)} | ${Math.round(r.putEventsBound)} | **${Math.round(r.projected)}** | ${r.limitedBy} | $${r.usdPerMillionEvents.toFixed(4)} | $${r.usdPerMonthAlwaysOn.toFixed(2)} |`,
  )
  .join('\n')}

CPU share = memory / 1,769 MB (one vCPU at 1,769 MB). PutEvents bound = concurrency (${defaults.publishConcurrency}) × 10 entries × 1000 / 20 ms. Duration price $${LAMBDA_PRICE.perGbSecondUsd} per GB-second (${LAMBDA_PRICE.architecture}, ${LAMBDA_PRICE.region}, first tier, as of ${LAMBDA_PRICE.asOf}); requests ($${LAMBDA_PRICE.perMillionRequestsUsd} per million) add one per minute. "Always-on": the schedule keeps one invocation polling at all times. Measured on this machine's x86 cores; Graviton's figure per event will differ.`,
  );
}

// 11. Scale-out: 1, 2 and 4 relay processes over the same backlog at 20 ms.
/** Busy and total jiffies of all cores, from /proc/stat. */
function cpuJiffies(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}
if (want('scale')) {
  await bus.setFaults({ latencyMs: 20 });
  const out: {
    relays: number;
    eventsPerSecond: number;
    machineCpuBusy: number;
    relayCpuCores: number;
    busCpuCores: number;
    minShare: number;
  }[] = [];
  for (const k of P.scaleRelays) {
    await reset();
    await seed(P.scaleRows);
    log(`scale: ${k} relay process(es) over ${P.scaleRows} rows at 20 ms`);
    const before = cpuJiffies();
    const busBefore = bus.cpuMs();
    const t = performance.now();
    const runs = await Promise.all(Array.from({ length: k }, () => runRelayProcess()));
    const ms = performance.now() - t;
    const after = cpuJiffies();
    const busCores = (bus.cpuMs() - busBefore) / ms;
    const published = runs.reduce((n, r) => n + r.published, 0);
    if (published < P.scaleRows) throw new Error(`scale-out published ${published} of ${P.scaleRows}`);
    out.push({
      relays: k,
      eventsPerSecond: rate(published, ms),
      machineCpuBusy: Math.round(((after.busy - before.busy) / (after.total - before.total)) * 100),
      relayCpuCores: Number((runs.reduce((n, r) => n + r.cpuUs, 0) / 1000 / ms).toFixed(2)),
      busCpuCores: Number(busCores.toFixed(2)),
      minShare: Math.min(...runs.map((r) => r.published)) / published,
    });
  }
  const single = out[0]?.eventsPerSecond ?? 1;
  results.scale = out;
  report(
    `### Scale-out: relay processes over the same ${P.scaleRows.toLocaleString('en')}-event backlog at 20 ms

| relays | events/s | per relay, share of one relay's figure | speed-up | machine CPU busy | relays' CPU (cores) | local bus CPU (cores) | smallest relay's share of the events |
|---|---|---|---|---|---|---|---|
${out
  .map(
    (o) =>
      `| ${o.relays} | ${o.eventsPerSecond} | ${Math.round((o.eventsPerSecond / o.relays / single) * 100)} % | ${(o.eventsPerSecond / single).toFixed(2)}× | ${o.machineCpuBusy} % | ${o.relayCpuCores} | ${o.busCpuCores} | ${Math.round(o.minShare * 100)} % |`,
  )
  .join('\n')}

Events/s from the start of the first relay to the end of the last (start-up included). Machine CPU busy is all ${cpus().length} cores from /proc/stat over the run: the relays, the local bus, Postgres and whatever else runs on the machine.`,
  );
}

// 12–13. The relay as deployed: lag across invocation boundaries, and draining a backlog with
// 1, 2 and 4 relays (bench/sections/).
const deployedContext = (): DeployedBenchContext => ({
  cdkOut: cdkOuts.get(root) as string,
  databaseUrl: dbUrl,
  database: dbName,
  sql,
  bus,
  log,
  report,
});
if (want('lambda-lag')) results.lambdaLag = await lambdaLag(deployedContext(), P.lambdaLag);
if (want('lambda-scale')) results.lambdaScale = await lambdaScale(deployedContext(), P.lambdaScale);
// 14. The outbox's cost in the user's database: WAL and server CPU per event (issue 20).
if (want('db-cost'))
  results.dbCost = await dbCost(
    { log, report },
    { events: 20_000, aggregates: 5_000, clients: 4, repeats: 3 },
  );

const m = results.machine as Record<string, unknown>;
m.loadPerCoreAtEnd = load();
const markdown = `## Benchmark (${results.profile} profile)\n\nMachine: ${m.cores} cores (${m.cpu}), ${m.memoryGiB} GiB, Node ${m.node}, PostgreSQL ${m.postgres}; load per core ${m.loadPerCoreAtStart} at the start, ${m.loadPerCoreAtEnd} at the end. Local bus in a process of its own.\n\n${tables.join('\n\n')}\n`;
mkdirSync(`${root}bench/results`, { recursive: true });
writeFileSync(`${root}bench/results/bench-${results.profile}.json`, JSON.stringify(results, null, 2));
writeFileSync(`${root}bench/results/bench-${results.profile}.md`, markdown);
process.stdout.write(
  `Written to bench/results/bench-${results.profile}.md, .json and chart-${results.profile}.svg\n`,
);

await sql.end();
await bus.close();
{
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`drop database if exists ${dbName} with (force)`);
  await admin.end();
}
await embedded?.stop();
