/**
 * `npm run bench` (quick profile, a few minutes) and `npm run bench -- --full`: throughput, lag,
 * claim cost, producer cost and footprint, each compared side by side in one run. Starts its own
 * Postgres (embedded, unless DATABASE_URL is set) and local bus; prints markdown tables and writes
 * JSON to bench/results/.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { connect, loadRelaySettings, migrate, type RelaySettings } from '../shared/platform/index.ts';
import { enqueue } from '../shared/producer/index.ts';
import { claimBatch, createEventBridgeClient, runRelay } from '../shared/relay/index.ts';
import { startEmbeddedPostgres } from '../test/support/embedded-postgres.ts';
import { startLocalBus } from '../test/support/local-bus.ts';
import { runNaiveRelay } from './naive-relay.ts';
import {
  runPgTransactionalOutbox,
  seedPgTransactionalOutbox,
  setUpPgTransactionalOutbox,
} from './pg-transactional-outbox.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({
  options: { full: { type: 'boolean', default: false }, only: { type: 'string', multiple: true } },
});
const full = values.full;
/** `--only lag` (repeatable) runs just the named parts: throughput, grid, lag, claim, producer, footprint. */
const want = (part: string) => !values.only || values.only.includes(part);
const P = {
  rows: full ? 50_000 : 20_000,
  baselineBudgetMs: full ? 20_000 : 6_000,
  latencies: [0, 20, 100],
  grid: full
    ? { batch: [50, 100, 500], concurrency: [1, 4, 16] }
    : { batch: [100, 500], concurrency: [1, 4, 16] },
  gridRows: full ? 20_000 : 8_000,
  lagRate: 1_000,
  lagSeconds: full ? 60 : 15,
  bloatRows: full ? 1_000_000 : 300_000,
  producerTxns: full ? 5_000 : 2_000,
};
const log = (line: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

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
await migrate(url.toString());
const sql = connect({ url: url.toString(), max: 8, env: {} });
const bus = await startLocalBus();
const client = createEventBridgeClient({
  endpoint: bus.url,
  region: 'us-east-1',
  credentials: { accessKeyId: 'b', secretAccessKey: 'b' },
});
const results: Record<string, unknown> = {
  profile: full ? 'full' : 'quick',
  machine: { cores: cpus().length, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version },
};
const [serverVersion] = await sql<{ server_version: string }[]>`show server_version`;
(results.machine as Record<string, unknown>).postgres = serverVersion?.server_version;

async function reset() {
  await sql`truncate outbox, outbox_aggregate`;
  bus.reset();
}
/** Inserts `n` pending events, one per aggregate, in bulk (not through enqueue: this is setup). */
async function seed(n: number, prefix = '') {
  await sql`
    insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
    select 'order', ${prefix} || g::text, 1, 'OrderPlaced', 'bench.orders', jsonb_build_object('orderId', g, 'total', g * 3)
    from generate_series(1, ${n}) g`;
  await sql`analyze outbox`;
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

// 1. Throughput: ours vs the naive baseline, at three bus latencies.
if (want('throughput')) {
  const rows: string[] = [
    '| bus latency | this relay (events/s) | naive baseline (events/s) | pg-transactional-outbox (events/s) | vs naive | vs pg-transactional-outbox | latency bound (4 × 10 × 1000 / ms) |',
    '|---|---|---|---|---|---|---|',
  ];
  await setUpPgTransactionalOutbox(sql);
  const out: unknown[] = [];
  for (const latency of P.latencies) {
    bus.setFaults({ latencyMs: latency });
    await reset();
    await seed(P.rows);
    log(`throughput: this relay, ${P.rows} rows, ${latency} ms`);
    let t = performance.now();
    const ours = await runRelay({ sql, client, settings: defaults, untilEmpty: true });
    const oursRate = rate(ours.published, performance.now() - t);
    await reset();
    await seed(P.rows);
    log(`throughput: naive baseline, ${latency} ms (time budget ${P.baselineBudgetMs} ms)`);
    t = performance.now();
    const naive = await runNaiveRelay(sql, client, 'bench-bus', P.baselineBudgetMs);
    const naiveRate = rate(naive, performance.now() - t);
    await seedPgTransactionalOutbox(sql, P.rows);
    log(`throughput: pg-transactional-outbox, ${latency} ms (time budget ${P.baselineBudgetMs} ms)`);
    t = performance.now();
    const pgto = await runPgTransactionalOutbox(
      url.toString(),
      client,
      'bench-bus',
      P.rows,
      P.baselineBudgetMs,
    );
    const pgtoRate = rate(pgto, performance.now() - t);
    const bound = latency === 0 ? '—' : String(rate(4 * 10, latency));
    const ratio = (other: number) => `${(oursRate / Math.max(other, 1)).toFixed(1)}×`;
    rows.push(
      `| ${latency} ms | ${oursRate} | ${naiveRate} | ${pgtoRate} | ${ratio(naiveRate)} | ${ratio(pgtoRate)} | ${bound} |`,
    );
    out.push({ latency, ours: oursRate, naive: naiveRate, pgTransactionalOutbox: pgtoRate });
  }
  results.throughput = out;
  report(
    `### Throughput, ${P.rows} rows (one aggregate each), one relay, default settings\n\n${rows.join('\n')}`,
  );
}

// 2. Grid: batch size × PutEvents concurrency at 20 ms.
if (want('grid')) {
  bus.setFaults({ latencyMs: 20 });
  const header = `| batch \\ concurrency | ${P.grid.concurrency.join(' | ')} |`;
  const rows = [header, `|---|${P.grid.concurrency.map(() => '---').join('|')}|`];
  const out: unknown[] = [];
  for (const batch of P.grid.batch) {
    const cells: string[] = [];
    for (const concurrency of P.grid.concurrency) {
      await reset();
      await seed(P.gridRows);
      log(`grid: batch ${batch}, concurrency ${concurrency}`);
      const t = performance.now();
      const r = await runRelay({
        sql,
        client,
        settings: { ...defaults, batchSize: batch, publishConcurrency: concurrency },
        untilEmpty: true,
      });
      const got = rate(r.published, performance.now() - t);
      const bound = rate(concurrency * 10, 20);
      cells.push(`${got} (${Math.round((got / bound) * 100)} % of ${bound})`);
      out.push({ batch, concurrency, eventsPerSecond: got, bound });
    }
    rows.push(`| ${batch} | ${cells.join(' | ')} |`);
  }
  results.grid = out;
  report(
    `### Batch size × PutEvents concurrency at 20 ms bus latency (events/s, share of the bound concurrency × 10 × 1000 / 20)\n\n${rows.join('\n')}`,
  );
}

// 3. Lag from commit to bus at a steady offered load, default settings.
if (want('lag')) {
  bus.setFaults({ latencyMs: 20 });
  await reset();
  const committedAt = new Map<string, number>();
  const lags: number[] = [];
  bus.emitter.on('accepted', (e) => {
    const id = (e.detail as { metadata: { eventId: string } }).metadata.eventId;
    const c = committedAt.get(id);
    if (c !== undefined) lags.push(e.receivedAt - c);
  });
  const abort = new AbortController();
  const relay = runRelay({ sql, client, settings: defaults, signal: abort.signal });
  log(`lag: ${P.lagRate} events/s for ${P.lagSeconds} s`);
  const producerSql = connect({ url: url.toString(), max: 8, env: {} });
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
  abort.abort();
  await relay;
  await producerSql.end();
  bus.emitter.removeAllListeners('accepted');
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

// 4. Claim latency: empty history vs a large published history, and under a held-open transaction.
if (want('claim')) {
  bus.setFaults({});
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
  const holder = postgres(url.toString(), { max: 1, onnotice: () => {} });
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
  await runRelay({ sql, client, settings: defaults, untilEmpty: true });
  await seed(10_000, 'after-');
  const bloated = await measureClaims(`after relaying ${P.gridRows} rows with a transaction held open`);
  await sql`select pg_terminate_backend(${holderPid})`;
  await held;
  await holder.end({ timeout: 1 });
  results.claim = { empty, history, bloated, historyRows: P.bloatRows };
  report(
    `### Claim latency (100 heads, ms)\n\n| table | p50 | p99 |\n|---|---|---|\n| 10,000 pending, no history | ${empty.p50} | ${empty.p99} |\n| + ${P.bloatRows.toLocaleString('en')} published rows | ${history.p50} (${(history.p50 / empty.p50).toFixed(2)}×) | ${history.p99} |\n| after relaying ${P.gridRows} rows under a held-open transaction | ${bloated.p50} | ${bloated.p99} |`,
  );
}

// 5. Producer cost: a one-insert business transaction with and without enqueue.
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

// 6. Footprint: bundle size, cold-start import time, peak RSS of a relay process.
if (want('footprint')) {
  const out = `${root}bench/results/relay-bundle.mjs`;
  mkdirSync(`${root}bench/results`, { recursive: true });
  execFileSync(
    `${root}node_modules/.bin/esbuild`,
    [
      `${root}functions/relay/handler.ts`,
      '--bundle',
      '--minify',
      '--platform=node',
      '--format=esm',
      '--target=node24',
      '--external:pg-native',
      `--outfile=${out}`,
      "--banner:js=import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
    ],
    { stdio: 'ignore' },
  );
  const bundleBytes = statSync(out).size;
  const imports: number[] = [];
  for (let i = 0; i < 5; i++) {
    const r = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const t = performance.now(); await import(${JSON.stringify(out)}); console.log(performance.now() - t); process.exit(0);`,
      ],
      {
        env: {
          PATH: process.env.PATH,
          EVENT_BUS_NAME: 'b',
          AWS_REGION: 'us-east-1',
          DATABASE_URL: url.toString(),
        },
        encoding: 'utf8',
      },
    );
    imports.push(Number(r.stdout.trim()));
  }
  await reset();
  await seed(P.rows);
  bus.setFaults({ latencyMs: 0 });
  // Asynchronous: the local bus answering this relay lives in this process's event loop.
  const rss = await new Promise<{ stderr: string }>((resolve) => {
    const child = spawn(
      '/usr/bin/time',
      ['-f', '%M', process.execPath, `${root}bin/outbox.js`, 'relay', '--until-empty', '--quiet'],
      {
        env: {
          PATH: process.env.PATH,
          DATABASE_URL: url.toString(),
          EVENT_BUS_NAME: 'b',
          AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
          AWS_REGION: 'us-east-1',
          AWS_ACCESS_KEY_ID: 'b',
          AWS_SECRET_ACCESS_KEY: 'b',
        },
      },
    );
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('close', () => resolve({ stderr }));
  });
  const peakKb = Number(rss.stderr.trim().split('\n').pop());
  results.footprint = { bundleBytes, importMsMedian: pct(imports, 50), peakRssMB: Math.round(peakKb / 1024) };
  report(
    `### Footprint\n\n| relay bundle (minified) | handler import (cold, median of 5) | peak RSS, \`outbox relay\` over ${P.rows} rows |\n|---|---|---|\n| ${(bundleBytes / 1024).toFixed(0)} KiB | ${pct(imports, 50).toFixed(0)} ms | ${Math.round(peakKb / 1024)} MB |`,
  );
}

const m = results.machine as Record<string, unknown>;
const markdown = `## Benchmark (${results.profile} profile)\n\nMachine: ${m.cores} cores, ${m.memoryGiB} GiB, Node ${m.node}, PostgreSQL ${m.postgres}; local bus in the same process.\n\n${tables.join('\n\n')}\n`;
mkdirSync(`${root}bench/results`, { recursive: true });
writeFileSync(`${root}bench/results/bench-${results.profile}.json`, JSON.stringify(results, null, 2));
writeFileSync(`${root}bench/results/bench-${results.profile}.md`, markdown);
process.stdout.write(`Written to bench/results/bench-${results.profile}.md and .json\n`);

await sql.end();
await bus.close();
{
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`drop database if exists ${dbName} with (force)`);
  await admin.end();
}
await embedded?.stop();
