/**
 * The bench's shared context: the database (embedded, unless DATABASE_URL is set) and the local
 * bus in a process of its own, the profile's parameters (`P`), the results and their tables, and
 * the helpers the sections share (seeding, `outbox relay` runs, the synthesised bundle). bench/run.ts
 * opens it, runs the sections of bench/sections/ with it, and finishes it.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';
import { connect, loadRelaySettings, migrate, type RelaySettings } from '../../shared/platform/index.ts';
import { PGTO_DEFAULTS } from '../pg-transactional-outbox.ts';
import type { DeployedBenchContext } from '../sections/lambda-lag.ts';
import { findLambdaAsset, type LambdaAsset } from '../support/bundle.ts';
import { lambdaNodeArgs } from '../support/lambda-host.ts';
import { type Measured, median, runMeasured, SCRIPTS, startBusProcess } from '../support/processes.ts';

/** What bench/run.ts was asked for on its command line. */
export interface BenchOptions {
  full: boolean;
  /** `--only`: the sections to run; all (but the long ones) when undefined. */
  only?: Set<string>;
  /** `--baseline <checkout>`: another checkout measured beside this one. */
  baselineDir?: string;
  /** `--scheduler-delay`: `model` or `none`. */
  schedulerDelay: string;
}

/**
 * The checkouts whose relay is measured: this one, and with `--baseline <dir>` another checkout
 * (its own node_modules installed), run alternately with this one so both meet the same machine.
 */
export interface Checkout {
  label: string;
  dir: string;
}

/** One `outbox relay` process over what is in the outbox. */
export interface RelayRun {
  published: number;
  /** The run as the relay timed it (its summary line: connect to exit), seconds. */
  runSeconds: number;
  cpuUs: number;
  maxRssMB: number;
  wallMs: number;
}

export interface RelayFigures {
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

/**
 * The parameters of a profile: rows, repeats, latencies and each section's knobs (quick, or
 * `--full`: more rows and repeats).
 * @param schedulerDelay `model` or `none` (the lambda-lag section)
 */
export function benchParameters(full: boolean, schedulerDelay: string) {
  const values = { 'scheduler-delay': schedulerDelay };
  return {
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
    economy: {
      meanGapMs: 15_000,
      periods: full ? 10 : 6,
      busLatencyMs: 20,
      schedulerJitterMs: 2_000,
      coldStartExtraMs: 1_000,
      idleReturnSeconds: 10,
      seed: 21,
    },
    lambdaScale: {
      rows: 100_000,
      relays: [1, 2, 4],
      busLatencyMs: 20,
      coldStartExtraMs: 1_000,
      drainTimeoutMs: 300_000,
    },
  };
}

/** The parameters of the run (see {@link benchParameters}). */
export type BenchParameters = ReturnType<typeof benchParameters>;

/** Opens the bench: creates its database, starts the bus, measures nothing yet. */
export async function openBench(options: BenchOptions) {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const { full, only, baselineDir } = options;
  const want = (section: string) => !only || only.has(section);
  /** Sections too long for the default run: only when named, or with `--full`. */
  const wantLong = (section: string) => (only ? only.has(section) : full);
  const P = benchParameters(full, options.schedulerDelay);
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

  const checkouts: Checkout[] = [{ label: 'this checkout', dir: root }];
  if (baselineDir) {
    const head = execFileSync('git', ['-C', baselineDir, 'log', '-1', '--format=%h %s'], {
      encoding: 'utf8',
    });
    checkouts.push({ label: `baseline ${head.trim().split(' ')[0]}`, dir: baselineDir });
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

  const ourFixedUs = () => relayFixedUs.get(root) ?? 0;

  // ---------------------------------------------------------------------------------------------
  // The deployed bundle: `cdk synth` (in each checkout), then the relay's asset from cdk.out.

  /** The relay asset of each checkout, by checkout directory. */
  const assets = new Map<string, LambdaAsset>();
  /** The `cdk synth` output folder of each checkout, by checkout directory. */
  const cdkOuts = new Map<string, string>();
  /** `cdk synth` in each checkout, once; the relay's asset of each from its cdk.out. */
  async function synth(): Promise<void> {
    if (cdkOuts.size > 0) return;
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

  /** The CPU of a relay run over an empty outbox, per checkout (all of them when relay or rounds run). */
  async function measureFixedCpu(): Promise<void> {
    for (const c of want('relay') || want('rounds') ? checkouts : checkouts.slice(0, 1)) {
      log(`relay (${c.label}): CPU of a run over an empty outbox (start-up, one claim, exit)`);
      relayFixedUs.set(c.dir, await relayFixedCpuUs(c.dir));
    }
  }

  /** The context of the deployed sections (bench/sections/lambda-lag.ts and those after it). */
  const deployedContext = (): DeployedBenchContext => ({
    cdkOut: cdkOuts.get(root) as string,
    databaseUrl: dbUrl,
    database: dbName,
    sql,
    bus,
    log,
    report,
  });

  /** Writes the results (JSON, markdown) and drops the bench's database. */
  async function finish(): Promise<void> {
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
  }

  return {
    P,
    full,
    root,
    checkouts,
    results,
    defaults,
    sql,
    bus,
    busEnv,
    dbUrl,
    dbName,
    serverUrl,
    baselineDir,
    reset,
    seed,
    rate,
    pct,
    report,
    tables,
    log,
    load,
    MB,
    want,
    wantLong,
    runRelayProcess,
    relayFixedCpuUs,
    measureRelay,
    relayFixedUs,
    relayAt,
    ourFixedUs,
    assets,
    cdkOuts,
    lambdaEnv,
    hostInit,
    synth,
    measureFixedCpu,
    deployedContext,
    finish,
  };
}

/** The bench's shared context (see {@link openBench}). */
export type Bench = Awaited<ReturnType<typeof openBench>>;
