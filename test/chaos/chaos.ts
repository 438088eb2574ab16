/**
 * The chaos suite: several relay *processes* (`outbox relay`) against one Postgres and the local
 * bus with faults on, while a driver commits (and rolls back) events for many aggregates, SIGKILLs
 * relays at random moments and restarts them, and restarts Postgres. At the end it checks, from the
 * bus's record and the table: nothing lost, no phantoms, per-aggregate order never violated, every
 * duplicate explained, dead letters only where poison was planted.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';
import { type AcceptedEvent, startLocalBus } from '../../shared/local/bus.ts';
import type { EnvelopeMetadata } from '../../shared/platform/envelope.ts';
import {
  isConnectionFailure,
  isTransientDatabaseError,
  loadRelaySettings,
  openPool,
  type Sql,
  withDeadline,
} from '../../shared/platform/index.ts';
import { migrate } from '../../shared/platform/migrate.ts';

const BIN = fileURLToPath(new URL('../../shared/relay/bin/outbox.js', import.meta.url));
const PRODUCER = fileURLToPath(new URL('./producer.ts', import.meta.url));
const POISON = 'chaos-poison-pill';

/** Knobs of one run. */
export interface ChaosOptions {
  events: number;
  relays: number;
  kills: number;
  aggregates: number;
  /** Restart Postgres once, half-way through producing. */
  restartPostgres: boolean;
  /** Share of transactions rolled back by the driver. */
  rollbackRate: number;
  /** Share of committed events planted as poison (refused by the bus as InvalidArgument). */
  poisonRate: number;
  /** Give up waiting for the drain after this long, ms. */
  drainTimeoutMs: number;
  /** `OUTBOX_LEASE_SECONDS` of the relays; default: the product's default (none set). */
  leaseSeconds?: number;
  log?: (line: string) => void;
}

/** What the run found. */
export interface ChaosReport {
  committed: number;
  rolledBack: number;
  publishedDistinct: number;
  deliveries: number;
  duplicates: number;
  duplicateRate: number;
  /** Duplicates sent after the previous copy's lease had run out (a slow relay). */
  leaseExpiryDuplicates: number;
  unexplainedDuplicates: number;
  lost: number;
  phantoms: number;
  rolledBackPublished: number;
  orderViolations: number;
  deadLettered: number;
  poisonPlanted: number;
  unexpectedDeadLetters: number;
  kills: number;
  postgresRestarts: number;
  faults: { throttled: number; serverErrors: number; entryFailures: number; lostResponses: number };
  seconds: number;
}

export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const log = o.log ?? (() => {});
  const started = Date.now();
  const pg = await startEmbeddedPostgres();
  const bus = await startLocalBus({
    faults: {
      latencyMs: [0, 3],
      spikeRate: 0.01,
      spikeMs: 400,
      throttleRate: 0.02,
      serverErrorRate: 0.02,
      entryFailureRate: 0.02,
      lostResponseRate: 0.01,
      poisonMarker: POISON,
      poisonCode: 'InvalidArgument',
    },
  });
  /** Times (ms since epoch) of kills and Postgres restarts, to explain duplicates. */
  const disruptions: number[] = [];
  const relays: (ChildProcess | undefined)[] = [];
  // The driver's own pool, replaced if a connection broke (the Postgres restart).
  const pool = openPool({ url: pg.url, max: 2, env: {} });
  const leaseSeconds = o.leaseSeconds ?? loadRelaySettings({ EVENT_BUS_NAME: 'chaos-bus' }).leaseSeconds;
  let producerProcess: ChildProcess | undefined;
  let postgresRestarts = 0;
  let kills = 0;
  try {
    await migrate(pg.url);
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: pg.url,
      EVENT_BUS_NAME: 'chaos-bus',
      AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'local',
      AWS_SECRET_ACCESS_KEY: 'local',
      ...(o.leaseSeconds === undefined ? {} : { OUTBOX_LEASE_SECONDS: String(o.leaseSeconds) }),
      OUTBOX_MAX_ATTEMPTS: '1000',
      OUTBOX_BACKOFF_BASE_MS: '20',
      OUTBOX_BACKOFF_MAX_MS: '500',
      OUTBOX_POLL_INTERVAL_MS: '20',
      OUTBOX_DB_CONNECT_TIMEOUT_SECONDS: '2',
    };
    const startRelay = (i: number) => {
      const child = spawn(process.execPath, [BIN, 'relay', '--quiet'], {
        env,
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      child.stderr?.on('data', () => {}); // drained; transient errors are expected here
      relays[i] = child;
    };
    for (let i = 0; i < o.relays; i++) startRelay(i);

    // Driver: producers (a process of their own, see producer.ts), a killer, and one Postgres restart.
    const producing = { done: false };
    const rolledBackIds: string[] = [];
    let enqueued = 0;
    const producer = spawn(
      process.execPath,
      [
        PRODUCER,
        '--url',
        pg.url,
        '--events',
        String(o.events),
        '--aggregates',
        String(o.aggregates),
        '--rollback-rate',
        String(o.rollbackRate),
        '--poison-rate',
        String(o.poisonRate),
        '--poison',
        POISON,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    producerProcess = producer;
    let producerErrors = '';
    producer.stderr?.on('data', (chunk: Buffer) => {
      producerErrors += chunk;
    });
    createInterface({ input: producer.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      const m = JSON.parse(line) as { offered?: number; rolledBack?: string[]; done?: boolean };
      if (m.offered !== undefined) enqueued = m.offered;
      if (m.rolledBack) rolledBackIds.push(...m.rolledBack);
    });
    const producers = new Promise<void>((resolve, reject) => {
      producer.once('exit', (code, signal) => {
        producing.done = true;
        if (code === 0) resolve();
        else
          reject(
            new Error(`chaos producer exited (${signal ?? `code ${code}`}): ${producerErrors.slice(-2000)}`),
          );
      });
    });
    const killer = async () => {
      while (kills < o.kills) {
        await sleep(randomInt(300, 1_500));
        const i = randomInt(0, o.relays);
        relays[i]?.kill('SIGKILL');
        disruptions.push(Date.now());
        kills++;
        log(`chaos: killed relay ${i} (${kills}/${o.kills})`);
        await sleep(randomInt(0, 500));
        startRelay(i);
      }
    };
    const restarter = async () => {
      if (!o.restartPostgres) return;
      while (enqueued < o.events / 2 && !producing.done) await sleep(50);
      log('chaos: restarting Postgres');
      disruptions.push(Date.now());
      await pg.restart();
      disruptions.push(Date.now());
      postgresRestarts++;
      log('chaos: Postgres is back');
    };
    await Promise.all([producers, killer(), restarter()]);
    log(`chaos: ${enqueued} events offered; waiting for the relays to drain the outbox`);

    // Drain: wait until no row is pending.
    const deadline = Date.now() + o.drainTimeoutMs;
    for (;;) {
      const generation = pool.generation;
      const pending = await countPending(pool.sql).catch((e: unknown) => {
        if (!isTransientDatabaseError(e)) throw e;
        if (isConnectionFailure(e)) pool.replace(generation);
        return Number.POSITIVE_INFINITY;
      });
      if (pending === 0) break;
      if (Date.now() > deadline) {
        log(`chaos: drain timed out with ${pending} rows pending`);
        break;
      }
      await sleep(200);
    }
    for (const r of relays) r?.kill('SIGTERM');
    await sleep(300);

    // Verdict, from the bus's record and the table.
    const rows = await pool.sql<
      {
        event_id: string;
        aggregate_id: string;
        sequence: string;
        poison: boolean;
        published: boolean;
        dead: boolean;
      }[]
    >`
      select event_id, aggregate_id, sequence, payload->>'note' = ${POISON} as poison,
             published_at is not null as published, dead_lettered_at is not null as dead
      from outbox.outbox`;
    const table = new Map(rows.map((r) => [r.event_id, r]));
    const meta = (e: AcceptedEvent) => (e.detail as unknown as { metadata: EnvelopeMetadata }).metadata;
    const onBus = new Map<string, AcceptedEvent[]>();
    for (const e of bus.events) {
      const id = meta(e).eventId;
      const list = onBus.get(id);
      if (list) list.push(e);
      else onBus.set(id, [e]);
    }
    const committed = rows.length;
    const poisonPlanted = rows.filter((r) => r.poison).length;
    const lost = rows.filter((r) => !r.poison && !onBus.has(r.event_id)).length;
    const phantoms = [...onBus.keys()].filter((id) => !table.has(id)).length;
    const rolledBackPublished = rolledBackIds.filter((id) => onBus.has(id) || table.has(id)).length;
    const deadLettered = rows.filter((r) => r.dead).length;
    const unexpectedDeadLetters = rows.filter((r) => r.dead && !r.poison).length;
    const orderViolations = countOrderViolations(bus.events.map(meta));
    let duplicates = 0;
    let leaseExpiryDuplicates = 0;
    let unexplainedDuplicates = 0;
    for (const copies of onBus.values()) {
      for (let i = 1; i < copies.length; i++) {
        duplicates++;
        const earlier = copies.slice(0, i);
        const previous = copies[i - 1] as AcceptedEvent;
        const copy = copies[i] as AcceptedEvent;
        const from = (copies[0] as AcceptedEvent).receivedAt - 1_000;
        if (earlier.some((c) => c.responseLost) || disruptions.some((t) => t >= from && t <= copy.receivedAt))
          continue;
        // A relay too slow to mark within its lease (CPU-starved, or a long bus spike): another
        // relay re-claimed the row after the lease ran out, which is at-least-once by design.
        if (copy.receivedAt - previous.receivedAt >= leaseSeconds * 1000 - 1_000) leaseExpiryDuplicates++;
        else unexplainedDuplicates++;
      }
    }
    return {
      committed,
      rolledBack: rolledBackIds.length,
      publishedDistinct: onBus.size,
      deliveries: bus.events.length,
      duplicates,
      duplicateRate: bus.events.length === 0 ? 0 : duplicates / bus.events.length,
      leaseExpiryDuplicates,
      unexplainedDuplicates,
      lost,
      phantoms,
      rolledBackPublished,
      orderViolations,
      deadLettered,
      poisonPlanted,
      unexpectedDeadLetters,
      kills,
      postgresRestarts,
      faults: {
        throttled: bus.stats.throttled,
        serverErrors: bus.stats.serverErrors,
        entryFailures: bus.stats.entryFailures,
        lostResponses: bus.stats.lostResponses,
      },
      seconds: (Date.now() - started) / 1000,
    };
  } finally {
    for (const r of relays) r?.kill('SIGKILL');
    producerProcess?.kill('SIGKILL');
    await pool.end(2).catch(() => {});
    await bus.close();
    await pg.stop();
  }
}

async function countPending(sql: Sql): Promise<number> {
  // Bounded: a query in flight when Postgres restarted may never be answered by the driver.
  const [row] = await withDeadline(
    sql<{ n: number }[]>`
      select count(*)::int as n from outbox.outbox where published_at is null and dead_lettered_at is null`,
    'count pending',
    5_000,
  );
  return row?.n ?? 0;
}

/**
 * Per aggregate, the first acceptances must come in increasing sequence order: an event first
 * accepted after a later event of its aggregate was overtaken. (Re-sends are duplicates, not
 * violations; dead-lettered events leave gaps, which are not violations either.)
 */
export function countOrderViolations(events: readonly EnvelopeMetadata[]): number {
  const seen = new Set<string>();
  const highest = new Map<string, number>();
  let violations = 0;
  for (const m of events) {
    if (seen.has(m.eventId)) continue;
    seen.add(m.eventId);
    const key = `${m.aggregateType}/${m.aggregateId}`;
    const top = highest.get(key) ?? 0;
    if (m.sequence < top) violations++;
    else highest.set(key, m.sequence);
  }
  return violations;
}

/** The report as a markdown table. */
export function formatReport(r: ChaosReport, o: ChaosOptions): string {
  const rows: [string, string | number][] = [
    ['relay processes', o.relays],
    ['relay lease (OUTBOX_LEASE_SECONDS)', o.leaseSeconds === undefined ? 'default' : `${o.leaseSeconds} s`],
    ['events committed', r.committed],
    ['events rolled back by the driver', r.rolledBack],
    ['relay kills (SIGKILL)', r.kills],
    ['Postgres restarts', r.postgresRestarts],
    [
      'faults: throttled / 500s / entry failures / lost responses',
      `${r.faults.throttled} / ${r.faults.serverErrors} / ${r.faults.entryFailures} / ${r.faults.lostResponses}`,
    ],
    ['**lost** (committed, never on the bus)', r.lost],
    ['**phantoms** (on the bus, not committed)', r.phantoms],
    ['rolled-back events published or stored', r.rolledBackPublished],
    ['**order violations**', r.orderViolations],
    ['distinct events on the bus', r.publishedDistinct],
    ['deliveries', r.deliveries],
    ['duplicates (same eventId)', `${r.duplicates} (${(r.duplicateRate * 100).toFixed(2)} %)`],
    ['duplicates after an expired lease (slow relay)', r.leaseExpiryDuplicates],
    ['duplicates not explained by a lost response, kill, restart or expired lease', r.unexplainedDuplicates],
    ['dead letters / poison planted', `${r.deadLettered} / ${r.poisonPlanted}`],
    ['dead letters without poison', r.unexpectedDeadLetters],
    ['duration', `${r.seconds.toFixed(1)} s`],
  ];
  return ['| check | result |', '|---|---|', ...rows.map(([k, v]) => `| ${k} | ${v} |`)].join('\n');
}

/** True when the run shows no loss, phantom, order violation, unexplained duplicate or stray dead letter. */
export function passed(r: ChaosReport): boolean {
  return (
    r.lost === 0 &&
    r.phantoms === 0 &&
    r.rolledBackPublished === 0 &&
    r.orderViolations === 0 &&
    r.unexplainedDuplicates === 0 &&
    r.unexpectedDeadLetters === 0 &&
    r.deadLettered === r.poisonPlanted
  );
}
