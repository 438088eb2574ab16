/**
 * The kill scenario of issue 12, as a script: looping `outbox relay` processes at the default
 * settings drain a backlog while one of them is SIGKILLed every few seconds and restarted at once.
 * Prints how many distinct events were on the bus over time, when the last one arrived, and the
 * per-aggregate order violations; then, separately, how long after a SIGKILL the dead relay's rows
 * became claimable again (read from the database clock: the latest `lease_expires_at` it left).
 *
 *   node test/chaos/kill-scenario.ts [--events 6000] [--aggregates 120] [--relays 3]
 *     [--kill-every-ms 2000] [--give-up-s 150] [--bus-latency-ms 0] [--kills-to-time 5]
 *     [--env KEY=VALUE …]
 *
 * Uses `DATABASE_URL`'s server when set (a database of its own is created and dropped), else an
 * embedded Postgres. `--env` adds relay settings, e.g. `--env OUTBOX_LEASE_SECONDS=5`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';
import { startLocalBus } from '../../shared/local/bus.ts';
import { connect } from '../../shared/platform/db.ts';
import type { EnvelopeMetadata } from '../../shared/platform/envelope.ts';
import { migrate } from '../../shared/platform/migrate.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { countOrderViolations } from './chaos.ts';

const BIN = fileURLToPath(new URL('../../shared/relay/bin/outbox.js', import.meta.url));

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '6000' },
    aggregates: { type: 'string', default: '120' },
    relays: { type: 'string', default: '3' },
    'kill-every-ms': { type: 'string', default: '2000' },
    'give-up-s': { type: 'string', default: '150' },
    'bus-latency-ms': { type: 'string', default: '0' },
    'kills-to-time': { type: 'string', default: '5' },
    env: { type: 'string', multiple: true, default: [] },
  },
});
const o = {
  events: Number(values.events),
  aggregates: Number(values.aggregates),
  relays: Number(values.relays),
  killEveryMs: Number(values['kill-every-ms']),
  giveUpMs: Number(values['give-up-s']) * 1000,
  busLatencyMs: Number(values['bus-latency-ms']),
  killsToTime: Number(values['kills-to-time']),
  env: Object.fromEntries((values.env as string[]).map((kv) => kv.split('=', 2) as [string, string])),
};
const log = (line: string) => process.stdout.write(`${line}\n`);

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const serverUrl = process.env.DATABASE_URL ?? (embedded?.url as string);
const dbName = `outbox_kill_${Date.now()}`;
const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
await admin.unsafe(`create database ${dbName}`);
const url = new URL(serverUrl);
url.pathname = `/${dbName}`;
await migrate(url.toString());
const sql = connect({ url: url.toString(), max: 2, env: {} });
const bus = await startLocalBus();
const env = {
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  DATABASE_URL: url.toString(),
  EVENT_BUS_NAME: 'kill-bus',
  AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
  AWS_REGION: 'us-east-1',
  AWS_ACCESS_KEY_ID: 'local',
  AWS_SECRET_ACCESS_KEY: 'local',
  ...o.env,
};
const spawnRelay = () =>
  spawn(process.execPath, [BIN, 'relay', '--quiet'], { env, stdio: ['ignore', 'ignore', 'ignore'] });

async function seed(n: number, prefix: string) {
  const events: OutboxEvent[] = Array.from({ length: n }, (_, i) => ({
    type: 'KillEvent',
    source: 'kill.scenario',
    aggregateType: 'agg',
    aggregateId: `${prefix}${i % o.aggregates}`,
    payload: { i },
  }));
  for (let i = 0; i < events.length; i += 1_000) {
    await sql.begin((tx) => enqueueMany(tx, events.slice(i, i + 1_000)));
  }
}

const distinct = () =>
  new Set(bus.events.map((e) => (e.detail as unknown as { metadata: EnvelopeMetadata }).metadata.eventId))
    .size;

const relays: ChildProcess[] = [];
try {
  // 1. The drain under kills.
  await seed(o.events, 'a');
  bus.setFaults({ latencyMs: o.busLatencyMs });
  log(
    `kill scenario: ${o.events} events over ${o.aggregates} aggregates, ${o.relays} relays, SIGKILL one every ${o.killEveryMs} ms, bus latency ${o.busLatencyMs} ms; settings ${JSON.stringify(o.env)}`,
  );
  const started = Date.now();
  for (let i = 0; i < o.relays; i++) relays[i] = spawnRelay();
  let kills = 0;
  let nextKill = started + o.killEveryMs;
  let nextReport = started + 10_000;
  let doneAt: number | undefined;
  while (Date.now() - started < o.giveUpMs) {
    await sleep(50);
    const now = Date.now();
    if (distinct() >= o.events) {
      doneAt = now;
      break;
    }
    if (now >= nextKill) {
      const i = kills % o.relays;
      relays[i]?.kill('SIGKILL');
      relays[i] = spawnRelay();
      kills++;
      nextKill += o.killEveryMs;
    }
    if (now >= nextReport) {
      log(`  after ${Math.round((now - started) / 1000)} s: ${distinct()} of ${o.events} on the bus`);
      nextReport += 10_000;
    }
  }
  const metas = bus.events.map((e) => (e.detail as unknown as { metadata: EnvelopeMetadata }).metadata);
  log(
    doneAt
      ? `all ${o.events} on the bus after ${((doneAt - started) / 1000).toFixed(1)} s`
      : `gave up after ${o.giveUpMs / 1000} s: ${distinct()} of ${o.events} on the bus`,
  );
  log(
    `kills ${kills}; deliveries ${bus.events.length} (duplicates ${bus.events.length - distinct()}); order violations ${countOrderViolations(metas)}`,
  );
  for (const r of relays) r.kill('SIGKILL');
  relays.length = 0;

  // 2. How long a dead relay's rows stay leased: one relay works through a backlog over a slow
  // bus (so it is always mid-pass), is SIGKILLed, and the rows it held are read at once.
  await sql`truncate outbox.outbox, outbox.outbox_aggregate`;
  bus.reset();
  bus.setFaults({ latencyMs: 100 });
  await seed(20_000, 'b');
  const waits: number[] = [];
  for (let k = 0; k < o.killsToTime; k++) {
    const relay = spawnRelay();
    relays[0] = relay;
    await sleep(2_000 + Math.random() * 1_000);
    relay.kill('SIGKILL');
    await new Promise((resolve) => relay.once('exit', resolve));
    const [row] = await sql<{ rows: number; wait: number | null }[]>`
      select count(*)::int as rows,
             extract(epoch from max(lease_expires_at) - now())::float8 as wait
      from outbox.outbox where lease_expires_at > now() and published_at is null`;
    waits.push(row?.wait ?? 0);
    log(
      `  kill ${k + 1}: ${row?.rows ?? 0} rows still leased, claimable again in ${(row?.wait ?? 0).toFixed(2)} s`,
    );
    await sleep(Math.max(0, (row?.wait ?? 0) * 1000) + 100);
  }
  if (waits.length > 0)
    log(`a dead relay's rows were claimable again at most ${Math.max(...waits).toFixed(2)} s after SIGKILL`);
} finally {
  for (const r of relays) r.kill('SIGKILL');
  await sql.end({ timeout: 2 });
  await bus.close();
  await admin.unsafe(`drop database if exists ${dbName} with (force)`);
  await admin.end({ timeout: 2 });
  await embedded?.stop();
}
