/**
 * `npm run soak`: millions of events through one outbox table at a steady rate, on a private
 * Postgres cluster at the server's defaults (autovacuum on, unlike the machine's own server), with
 * the relay claiming and the monitor pruning as deployed. Answers issue 20's question: does the
 * claim stay fast, and do the table and its indexes stay the same size, as the history passes
 * through (partial indexes bloat as rows leave them)?
 *
 * Producer: `enqueueMany` (through outbox_enqueue_many), `--per-txn` events per transaction over
 * `--aggregates` aggregates, at `--rate` events/s from 4 clients. Relay: `--relays` (4) loops of `relayPass`
 * at the default settings, to a local bus in a process of its own (no latency); each claim is
 * timed, and each claimed event's lag (claim time − created_at, one machine's clock). Monitor:
 * `prune` every 10 s with a published retention of `--retention` seconds, so that the table holds
 * a steady window of history as in production (7 days of it there, a minute here).
 *
 * Prints a line per 250,000 events (`--report-every`) (claim p50/p99 and lag over that stretch, table and index
 * sizes) and writes bench/results/soak.md and .json with the table at the checkpoints.
 *
 * Options: --events (5,000,000), --rate (events/s, 1,500), --per-txn (10), --aggregates (100,000),
 * --retention (s, 60), --no-history (the relay deletes what it publishes: OUTBOX_PUBLISHED_RETENTION_DAYS=0),
 * --bursts n with --burst-events (100,000) and --idle-seconds (60) (the burst mode instead of the
 * steady rate: see burstDriver), --schema-until <nnn> (apply the migrations up to this number only, to
 * measure an older schema), --label (for the results' file name), --report-every (250,000).
 * `EXPLAIN=<ms>` writes the server's log to bench/results/<label>-server.log: the plans of
 * statements slower than that, lock waits over a second, every autovacuum and autoanalyze.
 */
import { appendFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../dev/embedded-postgres.ts';
import { connect, loadRelaySettings, migrate } from '../shared/platform/index.ts';
import { enqueueMany } from '../shared/producer/index.ts';
import { createEventBridgeClient, RELAY_PLAN_CACHE_MODE } from '../shared/relay/index.ts';
import { Lease } from '../shared/relay/lease.ts';
import { prune } from '../shared/relay/operations/index.ts';
import { relayPass } from '../shared/relay/pass.ts';
import { type ClaimOptions, claimBatchKept } from '../shared/relay/sql/index.ts';
import type { ClaimedEvent } from '../shared/relay/types.ts';
import { startBusProcess } from './support/processes.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '5000000' },
    rate: { type: 'string', default: '1500' },
    'per-txn': { type: 'string', default: '10' },
    aggregates: { type: 'string', default: '100000' },
    retention: { type: 'string', default: '60' },
    'schema-until': { type: 'string' },
    label: { type: 'string', default: 'soak' },
    'report-every': { type: 'string', default: '250000' },
    relays: { type: 'string', default: '4' },
    'no-history': { type: 'boolean', default: false },
    bursts: { type: 'string', default: '0' },
    'burst-events': { type: 'string', default: '100000' },
    'idle-seconds': { type: 'string', default: '60' },
  },
});
const noHistory = values['no-history'];
const bursts = Number(values.bursts);
const total = Number(values.events);
const rate = Number(values.rate);
const perTxn = Number(values['per-txn']);
const aggregates = Number(values.aggregates);
const retentionSeconds = Number(values.retention);
const REPORT_EVERY = Number(values['report-every']);
const CHECKPOINTS = [1_000_000, 2_500_000, 5_000_000, 10_000_000].filter((c) => c <= total);
const PRODUCERS = 4;
const log = (line: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

// EXPLAIN=<ms>: the server's log goes to bench/results/<label>-server.log, with the plans of
// statements slower than that (auto_explain, actual rows; no per-node timing, whose clock reads
// would slow every statement of the run, logged or not), lock waits over a second
// and every autovacuum and autoanalyze of the run: what a stretch of slow claims coincided with.
const explainMs = process.env.EXPLAIN;
const serverLogPath = join(root, `bench/results/${values.label}-server.log`);
if (explainMs !== undefined) {
  mkdirSync(join(root, 'bench/results'), { recursive: true });
  writeFileSync(serverLogPath, '');
}
const cluster = await startEmbeddedPostgres(
  explainMs === undefined
    ? {}
    : {
        postgresFlags: [
          ...['-c', 'session_preload_libraries=auto_explain'],
          ...['-c', `auto_explain.log_min_duration=${Number(explainMs)}`],
          ...['-c', 'auto_explain.log_analyze=on', '-c', 'auto_explain.log_buffers=on'],
          ...['-c', 'auto_explain.log_timing=off'],
          ...['-c', 'log_lock_waits=on', '-c', 'log_autovacuum_min_duration=0'],
        ],
        serverLog: true,
        log: (line) => appendFileSync(serverLogPath, `${line}\n`),
      },
);
const admin = postgres(cluster.url, { max: 1, onnotice: () => {} });
await admin.unsafe('create database soak');
await admin.end();
const url = new URL(cluster.url);
url.pathname = '/soak';
const dbUrl = url.toString();
if (values['schema-until']) {
  // An older schema: the migration files up to this number, applied as they are.
  const until = values['schema-until'];
  const s = postgres(dbUrl, { max: 1, onnotice: () => {} });
  const dir = join(root, 'migrations');
  for (const f of readdirSync(dir).sort()) {
    if (f.endsWith('.sql') && f.slice(0, 3) <= until) await s.unsafe(readFileSync(join(dir, f), 'utf8'));
  }
  await s.end();
} else {
  await migrate(dbUrl, { log: () => {} });
}
const sql = connect({ url: dbUrl, max: 12, env: {} });
// The relays' pool, opened as createRelay opens its own: every claim planned for the table as it is.
const relaySql = connect({ url: dbUrl, max: 12, env: {}, planCacheMode: RELAY_PLAN_CACHE_MODE });
const [server] = await sql<{ v: string; av: string }[]>`
  select current_setting('server_version') as v, current_setting('autovacuum') as av`;
log(
  `soak: Postgres ${server?.v}, autovacuum ${server?.av}; ${total} events at ${rate}/s, ${perTxn} per transaction`,
);

const bus = await startBusProcess();
const settings = loadRelaySettings({
  EVENT_BUS_NAME: 'soak-bus',
  ...(noHistory ? { OUTBOX_PUBLISHED_RETENTION_DAYS: '0' } : {}),
});
if (noHistory)
  log('soak: no published history (OUTBOX_PUBLISHED_RETENTION_DAYS=0): the relay deletes what it publishes');
const client = createEventBridgeClient({
  endpoint: bus.url,
  region: 'us-east-1',
  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
});

let enqueued = 0;
let stopping = false;
let claimMs: number[] = [];
let lagMs: number[] = [];
let published = 0;
/** Claims so far, and the times of the empty ones since the last read (the burst mode's idle polls). */
let claimCount = 0;
let emptyClaimMs: number[] = [];
const errors: string[] = [];
/** Errors by where they happened. A relay pass that ran out of time on a loaded machine is counted and the loop goes on; enqueue errors stop the soak at 20. */
const errorCounts: Record<string, number> = {};
const noteError = (where: string, e: unknown) => {
  errorCounts[where] = (errorCounts[where] ?? 0) + 1;
  if (errors.length < 20) errors.push(`${where}: ${(e as Error).message}`);
  log(`${where}: ${(e as Error).message}`);
};

// Producer: each client owns every PRODUCERS-th transaction and sends it when the schedule says.
const started = performance.now();
const payload = { total: 120.5, currency: 'EUR', lines: [{ sku: 'A-1', qty: 2 }], note: 'soak' };
const types = ['OrderPlaced', 'OrderPaid', 'OrderShipped'];
/** Events `first` … `first + n - 1` of the soak: three types in turn, spread over the aggregates. */
function soakEvents(first: number, n: number) {
  return Array.from({ length: n }, (_, j) => {
    const i = first + j;
    return {
      type: types[i % types.length] as string,
      source: 'soak.orders',
      aggregateType: 'order',
      aggregateId: String((i * 7919) % aggregates),
      payload: { ...payload, n: i },
    };
  });
}

async function producer(k: number) {
  for (let txn = k; !stopping; txn += PRODUCERS) {
    const first = txn * perTxn;
    if (first >= total) return;
    const due = started + (first / rate) * 1000;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const events = soakEvents(first, Math.min(perTxn, total - first));
    try {
      await sql.begin((tx) => enqueueMany(tx, events));
      enqueued += events.length;
    } catch (e) {
      noteError('enqueue', e);
      txn -= PRODUCERS; // the schedule slips; the event count stays exact
    }
  }
}

// Relay: loops of passes, each claim timed.
async function relay() {
  const deps = { sql: relaySql, client, settings };
  const timedClaim = async (o: ClaimOptions, keep: (events: ClaimedEvent[]) => void) => {
    const t0 = performance.now();
    const rows = await claimBatchKept(relaySql, o, keep);
    const now = Date.now();
    claimMs.push(performance.now() - t0);
    claimCount++;
    if (rows.length === 0) emptyClaimMs.push(performance.now() - t0);
    for (const r of rows) lagMs.push(now - r.createdAt.getTime());
    return rows;
  };
  while (!stopping || published < enqueued) {
    try {
      const counts = await relayPass(deps, new Lease(settings.leaseSeconds), { claim: timedClaim });
      published += counts.published;
      if (counts.claimed === 0) {
        // Stopping and nothing left to claim now. (A pass that ran out of time loses its count,
        // so `published` may never reach `enqueued`: waiting for it hung the first 5M run.)
        if (stopping) return;
        await sleep(settings.pollIntervalMs);
      }
    } catch (e) {
      noteError('relay', e);
      await sleep(1000);
    }
  }
}

// Monitor: prune every 10 s, as the scheduled monitor does (every minute there).
async function monitor() {
  while (!stopping) {
    try {
      await prune(sql, {
        publishedRetentionSeconds: retentionSeconds,
        deadLetterRetentionSeconds: 86_400,
        batchSize: 1_000,
        timeBudgetMs: 8_000,
      });
    } catch (e) {
      noteError('prune', e);
    }
    await Promise.race([sleep(10_000), stopped]);
  }
}
/** One idle window after a burst: what each empty claim cost while the outbox had nothing to claim. */
interface IdleWindow {
  /** Seconds since the burst was drained, at the window's end. */
  atS: number;
  claims: number;
  /** Blocks of `outbox_pending_idx` read (hit or read) per claim, from pg_statio_user_indexes. */
  pendingIndexBlocksPerClaim: number;
  emptyClaimP50Ms: number;
  /** Autovacuums of the outbox since the burst was drained. */
  autovacuumsSinceDrained: number;
}
interface BurstResult {
  burst: number;
  enqueueS: number;
  drainedAfterS: number;
  idle: IdleWindow[];
  /** Seconds from drained to the outbox's next autovacuum; undefined when none came in the idle time. */
  autovacuumAfterS?: number;
}
const IDLE_WINDOW_S = 10;

async function statsOf() {
  // Backends flush their statistics at least once a second when idle: read after a short wait.
  const [r] = await sql<{ blocks: string; av: string }[]>`
    select (select coalesce(sum(idx_blks_hit + idx_blks_read), 0) from pg_statio_user_indexes
            where indexrelname = 'outbox_pending_idx') as blocks,
           (select autovacuum_count from pg_stat_user_tables where relname = 'outbox') as av`;
  return { blocks: Number(r?.blocks), autovacuums: Number(r?.av) };
}

/**
 * The burst mode (`--bursts n`): n times, `--burst-events` events enqueued as fast as the producers
 * go, drained by the relays, then `--idle-seconds` with nothing to claim, in windows of 10 s: what
 * the relays' empty polls read until autovacuum comes (docs/investigations/soak.md#the-idle-poll-after-a-burst).
 */
async function burstDriver(): Promise<BurstResult[]> {
  const burstEvents = Number(values['burst-events']);
  const idleSeconds = Number(values['idle-seconds']);
  const results: BurstResult[] = [];
  let next = 0;
  for (let b = 1; b <= bursts; b++) {
    const t0 = performance.now();
    const end = next + burstEvents;
    // Each producer takes the next transaction's first event number as it goes.
    const take = () => {
      const first = next;
      next += perTxn;
      return first;
    };
    await Promise.all(
      Array.from({ length: PRODUCERS }, async () => {
        for (let first = take(); first < end; first = take()) {
          const events = soakEvents(first, Math.min(perTxn, end - first));
          await sql.begin((tx) => enqueueMany(tx, events));
          enqueued += events.length;
        }
      }),
    );
    next = end;
    const enqueueS = (performance.now() - t0) / 1000;
    for (;;) {
      const [p] = await sql<{ n: string }[]>`
        select count(*) as n from outbox.outbox where published_at is null and dead_lettered_at is null`;
      if (Number(p?.n) === 0) break;
      await sleep(200);
    }
    const drainedAt = performance.now();
    await sleep(1_100);
    const start = await statsOf();
    let before = start;
    let claimsBefore = claimCount;
    emptyClaimMs = [];
    const idle: IdleWindow[] = [];
    let autovacuumAfterS: number | undefined;
    for (let w = 1; w * IDLE_WINDOW_S <= idleSeconds; w++) {
      await sleep(IDLE_WINDOW_S * 1000);
      const now = await statsOf();
      const claims = claimCount - claimsBefore;
      idle.push({
        atS: Math.round((performance.now() - drainedAt) / 1000),
        claims,
        pendingIndexBlocksPerClaim: claims ? Math.round((now.blocks - before.blocks) / claims) : 0,
        emptyClaimP50Ms: Number(pct(emptyClaimMs, 50).toFixed(2)),
        autovacuumsSinceDrained: now.autovacuums - start.autovacuums,
      });
      if (autovacuumAfterS === undefined && now.autovacuums > start.autovacuums) {
        autovacuumAfterS = Math.round((performance.now() - drainedAt) / 1000);
      }
      before = now;
      claimsBefore = claimCount;
      emptyClaimMs = [];
    }
    const r: BurstResult = {
      burst: b,
      enqueueS: Number(enqueueS.toFixed(1)),
      drainedAfterS: Number(((drainedAt - t0) / 1000).toFixed(1)),
      idle,
      autovacuumAfterS,
    };
    log(
      `burst ${b}: ${burstEvents} events enqueued in ${r.enqueueS} s, drained after ${r.drainedAfterS} s; idle: ${idle
        .map((i) => `${i.atS} s ${i.pendingIndexBlocksPerClaim} blocks/claim ${i.emptyClaimP50Ms} ms`)
        .join(
          ', ',
        )}; autovacuum ${autovacuumAfterS === undefined ? 'not in the idle time' : `after ${autovacuumAfterS} s`}`,
    );
    results.push(r);
  }
  return results;
}

/** Prints the markdown and writes it, with the JSON, to bench/results/<label>.md and .json. */
function writeResults(markdown: string, json: unknown): void {
  process.stdout.write(`${markdown}\n`);
  mkdirSync(join(root, 'bench/results'), { recursive: true });
  writeFileSync(join(root, `bench/results/${values.label}.md`), markdown);
  writeFileSync(join(root, `bench/results/${values.label}.json`), JSON.stringify(json, null, 2));
}

let markStopped = () => {};
const stopped = new Promise<void>((r) => {
  markStopped = r;
});

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
};
const kB = (b: number) => Math.round(b / 1024);

interface Sample {
  events: number;
  elapsedS: number;
  claimP50Ms: number;
  claimP99Ms: number;
  claims: number;
  lagP50Ms: number;
  lagP99Ms: number;
  lagMaxMs: number;
  /**
   * This process's event-loop delay over the stretch, ms (p99, max): producers, relay loops and
   * the monitor share one Node process, so a busy loop shows up as slow claims and lag that the
   * database did not cause.
   */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  rows: number;
  tableKiB: number;
  indexesKiB: number;
  indexKiB: Record<string, number>;
  aggregateTableKiB: number;
  deadTuples: number;
  autovacuums: number;
}
async function sample(): Promise<Sample> {
  const [t] = await sql<
    { table: string; indexes: string; rows: string; dead: string; av: string; agg: string }[]
  >`
    select pg_table_size('outbox') as table, pg_indexes_size('outbox') as indexes,
           (select count(*) from outbox.outbox) as rows,
           s.n_dead_tup as dead, s.autovacuum_count as av,
           pg_total_relation_size('outbox_aggregate') as agg
    from pg_stat_user_tables s where s.relname = 'outbox'`;
  const idx = await sql<{ name: string; size: string }[]>`
    select indexrelid::regclass::text as name, pg_relation_size(indexrelid) as size
    from pg_index where indrelid = 'outbox'::regclass order by 1`;
  const s: Sample = {
    events: enqueued,
    elapsedS: Math.round((performance.now() - started) / 1000),
    claimP50Ms: Number(pct(claimMs, 50).toFixed(2)),
    claimP99Ms: Number(pct(claimMs, 99).toFixed(2)),
    claims: claimMs.length,
    lagP50Ms: Math.round(pct(lagMs, 50)),
    lagP99Ms: Math.round(pct(lagMs, 99)),
    lagMaxMs: Math.round(pct(lagMs, 100)),
    loopDelayP99Ms: Math.round(loopDelay.percentile(99) / 1e6),
    loopDelayMaxMs: Math.round(loopDelay.max / 1e6),
    rows: Number(t?.rows),
    tableKiB: kB(Number(t?.table)),
    indexesKiB: kB(Number(t?.indexes)),
    indexKiB: Object.fromEntries(idx.map((i) => [i.name, kB(Number(i.size))])),
    aggregateTableKiB: kB(Number(t?.agg)),
    deadTuples: Number(t?.dead),
    autovacuums: Number(t?.av),
  };
  claimMs = [];
  lagMs = [];
  loopDelay.reset();
  return s;
}

const loopDelay = monitorEventLoopDelay({ resolution: 20 });
loopDelay.enable();
const samples: Sample[] = [];
const fresh = await sample();
samples.push(fresh);
if (bursts > 0) {
  const work = [...Array.from({ length: Number(values.relays) }, () => relay()), monitor()];
  const busCleaner = setInterval(() => void bus.reset().catch(() => {}), 10_000);
  const results = await burstDriver();
  clearInterval(busCleaner);
  stopping = true;
  markStopped();
  await Promise.all(work);
  const windows = results[0]?.idle.map((i) => i.atS) ?? [];
  const markdown = `### Soak in bursts: the idle poll after a burst (${values.label})

${bursts} bursts of ${Number(values['burst-events']).toLocaleString('en')} events (${perTxn} per transaction, ${aggregates.toLocaleString('en')} aggregates, ${PRODUCERS} producers as fast as they go), each drained by ${values.relays} relays at the defaults${noHistory ? ' with no published history' : ''}, then ${values['idle-seconds']} s with nothing to claim; prune every 10 s with ${retentionSeconds} s retention; Postgres ${server?.v}, autovacuum ${server?.av}. Per idle window of ${IDLE_WINDOW_S} s: blocks of \`outbox_pending_idx\` read per claim (pg_statio_user_indexes), and an empty claim's p50 (ms); "AV" marks the windows after the outbox's first autovacuum since the burst was drained.

| burst | enqueued in (s) | drained after (s) | ${windows.map((w) => `idle ${w} s`).join(' | ')} | autovacuum after |
|---|---|---|${windows.map(() => '---').join('|')}|---|
${results
  .map(
    (r) =>
      `| ${r.burst} | ${r.enqueueS} | ${r.drainedAfterS} | ${r.idle
        .map(
          (i) =>
            `${i.pendingIndexBlocksPerClaim} blocks, ${i.emptyClaimP50Ms} ms${i.autovacuumsSinceDrained ? ' (AV)' : ''}`,
        )
        .join(' | ')} | ${r.autovacuumAfterS === undefined ? '–' : `${r.autovacuumAfterS} s`} |`,
  )
  .join('\n')}
${errors.length ? `\nErrors (${JSON.stringify(errorCounts)}; the first ones): ${errors.join('; ')}\n` : ''}`;
  writeResults(markdown, { results, errors, errorCounts });
  await sql.end();
  await relaySql.end();
  await bus.close();
  await cluster.stop();
  process.exit(0);
}
const work = [
  ...Array.from({ length: PRODUCERS }, (_, k) => producer(k)),
  ...Array.from({ length: Number(values.relays) }, () => relay()),
  monitor(),
];
let nextReport = REPORT_EVERY;
let busResetAt = 0;
while (enqueued < total && (errorCounts.enqueue ?? 0) < 20) {
  await sleep(1000);
  // The local bus keeps every accepted event: clear it as we go.
  if (performance.now() - busResetAt > 10_000) {
    await bus.reset();
    busResetAt = performance.now();
  }
  if (enqueued >= nextReport) {
    const s = await sample();
    samples.push(s);
    const behind = Math.round(((performance.now() - started) / 1000) * rate - enqueued);
    log(
      `${s.events} events (${s.elapsedS} s, ${behind > rate ? `${behind} behind schedule` : 'on schedule'}): claim p50 ${s.claimP50Ms} ms p99 ${s.claimP99Ms} ms (${s.claims} claims), lag p50 ${s.lagP50Ms} ms p99 ${s.lagP99Ms} ms max ${s.lagMaxMs} ms, event loop delay p99 ${s.loopDelayP99Ms} ms max ${s.loopDelayMaxMs} ms; ${s.rows} rows, table ${s.tableKiB} KiB, indexes ${s.indexesKiB} KiB ${JSON.stringify(s.indexKiB)}, outbox_aggregate ${s.aggregateTableKiB} KiB, dead tuples ${s.deadTuples}, autovacuums ${s.autovacuums}`,
    );
    nextReport += REPORT_EVERY;
  }
}
stopping = true;
markStopped();
await Promise.all(work);
if ((samples.at(-1)?.events ?? 0) < enqueued) samples.push(await sample());
log(
  `soak: ${enqueued} events in ${Math.round((performance.now() - started) / 1000)} s, ${published} published`,
);

const at = (n: number) => samples.find((s) => s.events >= n);
const first = samples[1] ?? fresh;
const cols = [
  { label: `first ${Math.round(first.events / 1000)}k`, s: first },
  ...CHECKPOINTS.map((c) => ({ label: `${c / 1e6}M`, s: at(c) })),
];
const row = (name: string, f: (s: Sample) => string | number) =>
  `| ${name} | ${cols.map((c) => (c.s ? f(c.s) : '–')).join(' | ')} |`;
const indexNames = Object.keys(samples.at(-1)?.indexKiB ?? {});
const markdown = `### Soak: ${total.toLocaleString('en')} events through one table (${values.label})

${rate} events/s, ${perTxn} per transaction, ${aggregates.toLocaleString('en')} aggregates; relay at the defaults; prune every 10 s with ${retentionSeconds} s retention; Postgres ${server?.v}, autovacuum ${server?.av}. Latencies over the ${REPORT_EVERY.toLocaleString('en')} events before each point (the first column: the first ${REPORT_EVERY.toLocaleString('en')}, from a fresh table).

| | ${cols.map((c) => c.label).join(' | ')} |
|---|${cols.map(() => '---').join('|')}|
${row('claim p50 (ms)', (s) => s.claimP50Ms)}
${row('claim p99 (ms)', (s) => s.claimP99Ms)}
${row('lag at claim p50 / p99 (ms)', (s) => `${s.lagP50Ms} / ${s.lagP99Ms}`)}
${row("this process's event-loop delay p99 / max (ms)", (s) => `${s.loopDelayP99Ms} / ${s.loopDelayMaxMs}`)}
${row('rows in outbox', (s) => s.rows.toLocaleString('en'))}
${row('outbox table (KiB)', (s) => s.tableKiB.toLocaleString('en'))}
${row('outbox indexes (KiB)', (s) => s.indexesKiB.toLocaleString('en'))}
${indexNames.map((n) => row(`\`${n}\``, (s) => (s.indexKiB[n] ?? 0).toLocaleString('en'))).join('\n')}
${row('outbox_aggregate (KiB)', (s) => s.aggregateTableKiB.toLocaleString('en'))}
${row('autovacuums of outbox', (s) => s.autovacuums)}
${errors.length ? `\nErrors (${JSON.stringify(errorCounts)}; the first ones): ${errors.join('; ')}\n` : ''}`;
writeResults(markdown, { samples, errors, errorCounts });

await sql.end();
await relaySql.end();
await bus.close();
await cluster.stop();
