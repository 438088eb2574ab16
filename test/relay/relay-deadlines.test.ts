/**
 * Deadlines and back-pressure (issue 12, relay side): a bus that never answers, a database that
 * stops answering, throttling, a relay killed mid-pass and a pass slower than its lease.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createRelayHandler } from '../../functions/relay/relay-handler.ts';
import { connect, type Envelope } from '../../shared/platform/index.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { AnswerTimeout } from '../../shared/relay/answer-timeout.ts';
import { createEventBridgeClient, runRelay } from '../../shared/relay/index.ts';
import { type PassReport, passWithLease, relayOnce, UnreturnedLeases } from '../../shared/relay/loop.ts';
import { createRelay } from '../../shared/relay/run-relay.ts';
import { Semaphore } from '../../shared/relay/semaphore.ts';
import { claimBatch } from '../../shared/relay/sql/index.ts';
import { useHarness } from '../support/harness.ts';
import { lambdaContext } from '../support/lambda.ts';
import { claimOptions, testClient, testSettings } from '../support/relay.ts';
import { startStallProxy } from '../support/stall-proxy.ts';

const h = useHarness({ max: 6 });

const event = (aggregateId: string, i = 0): OutboxEvent => ({
  type: 'Changed',
  source: 'test.deadlines',
  aggregateType: 'item',
  aggregateId,
  payload: { i },
});
const seed = (events: OutboxEvent[]) => h.db.sql.begin((tx) => enqueueMany(tx, events));

interface RowState {
  aggregate_id: string;
  sequence: string;
  published: boolean;
  dead: boolean;
  attempts: number;
  leased: boolean;
  last_error: string | null;
}
const rows = () => h.db.sql<RowState[]>`
  select aggregate_id, sequence, published_at is not null as published, dead_lettered_at is not null as dead,
         attempts, lease_token is not null as leased, last_error
  from outbox order by aggregate_id, sequence`;

/** A TCP listener that accepts connections and never answers (a hung endpoint). */
async function startHungEndpoint() {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe('deadlines', () => {
  it('ends PutEvents to a bus that never answers inside the lease, and defers the event with its attempt returned', async () => {
    const hung = await startHungEndpoint();
    try {
      await seed([event('hung')]);
      // The product's client (its timeouts and retries), pointed at the hung endpoint.
      const client = createEventBridgeClient({
        endpoint: hung.url,
        region: 'us-east-1',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      });
      const started = performance.now();
      const counts = await relayOnce({ sql: h.db.sql, client, settings: testSettings({ leaseSeconds: 15 }) });
      expect(performance.now() - started).toBeLessThan(15_000);
      expect(counts).toMatchObject({ claimed: 1, published: 0, deadLettered: 0, retried: 1 });
      const [row] = await rows();
      expect(row).toMatchObject({ published: false, dead: false, attempts: 0, leased: false });
      expect(row?.last_error).toMatch(/abort|timeout/i);
    } finally {
      await hung.close();
    }
  }, 45_000);

  it('returns before its deadline while the database holds all traffic, and publishes once it answers', async () => {
    const target = new URL(h.db.url);
    const proxy = await startStallProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const sql = connect({ url: proxy.urlFor(h.db.url), max: 3, env: {}, applicationName: 'relay-stalled' });
    try {
      const handler = createRelayHandler({
        relay: createRelay({
          sql,
          client: testClient(h.bus.url),
          settings: testSettings({ leaseSeconds: 8 }),
        }),
      });
      // A warm invocation first: its connections are open when the stall begins.
      await seed([event('warm')]);
      expect((await handler({}, lambdaContext(8_200))).published).toBe(1);
      await seed([event('a'), event('b'), event('c')]);
      proxy.hold(30_000);
      const started = performance.now();
      const summary = await handler({}, lambdaContext(15_000));
      expect(performance.now() - started).toBeLessThan(15_000);
      expect(summary.published).toBe(0);
      proxy.release();
      await runRelay({ sql, client: testClient(h.bus.url), settings: testSettings(), untilEmpty: true });
      const state = await rows();
      expect(state.filter((r) => r.published)).toHaveLength(4);
      expect(state.filter((r) => r.dead)).toHaveLength(0);
      // A claim the proxy held still runs once it is delivered, and is rolled back: its relay had
      // given up on it (claimBatchKept). Each event spent the attempt of the claim that sent it.
      expect(Math.max(...state.map((r) => r.attempts))).toBe(1);
    } finally {
      proxy.release();
      await sql.end({ timeout: 2 });
      await proxy.close();
    }
  }, 90_000);
});

describe('waiting for a PutEvents slot (issue 31, item 11)', () => {
  it('leaves the queue when its signal aborts, and the slot goes to the next in line', async () => {
    const slots = new Semaphore(1);
    const ran: string[] = [];
    const holder = slots.run(async () => {
      await sleep(100);
      ran.push('holder');
    });
    const gaveUp = new AbortController();
    const first = slots.run(async () => void ran.push('first'), gaveUp.signal);
    const second = slots.run(async () => void ran.push('second'), new AbortController().signal);
    gaveUp.abort(new Error('watchdog'));
    await expect(first).rejects.toThrow('watchdog');
    await Promise.all([holder, second]);
    await slots.run(async () => void ran.push('after'));
    expect(ran).toEqual(['holder', 'second', 'after']);
    // An already aborted signal never queues.
    await expect(
      slots.run(async () => void ran.push('late'), AbortSignal.abort(new Error('over'))),
    ).rejects.toThrow('over');
    expect(ran).not.toContain('late');
  });

  it('ends inside the lease (renewed while it waits) and at the deadline, and sends nothing after the deadline', async () => {
    // Pass A holds the only slot with a call the bus answers after 6 s.
    await seed([event('holder')]);
    h.bus.setFaults({ latencyMs: 6_000 });
    const client = testClient(h.bus.url);
    const deps = {
      sql: h.db.sql,
      client,
      publishSlots: new Semaphore(1),
      answerTimeout: new AnswerTimeout({ initialMs: 10_000 }),
      settings: testSettings({ batchSize: 1 }),
    };
    const a = relayOnce(deps, 20);
    while (h.bus.stats.requests < 1) await sleep(20);
    await seed([event('waits'), event('deadline')]);
    // B (5 s lease) and C (an invocation ending in 3 s) claim one row each and queue for the slot.
    const ended = new Map<string, PassReport>();
    const onPassEnd = (name: string) => (r: PassReport) => ended.set(name, r);
    const unreturned = new UnreturnedLeases();
    const startedAt = performance.now();
    const endBy = startedAt + 3_000;
    const [b, c, counts] = await Promise.allSettled([
      passWithLease({ ...deps, onPassEnd: onPassEnd('B') }, 5, unreturned),
      passWithLease({ ...deps, onPassEnd: onPassEnd('C') }, 5, unreturned, { endBy }),
      a,
    ]);
    // Before: both returned when A's call freed the slot, about 6 s after it started, 1 s after
    // B's lease and 3 s after C's deadline.
    const late = {
      B: Math.round((ended.get('B')?.endedAt ?? Number.NaN) - (ended.get('B')?.heldUntil ?? 0)),
      C: Math.round(
        (ended.get('C')?.endedAt ?? Number.NaN) - Math.min(ended.get('C')?.heldUntil ?? 0, endBy),
      ),
    };
    // C's watchdog fires at its deadline itself (the caller keeps a margin after it): a few ms late.
    expect(late, 'ms each pass ended after its lease or deadline').toEqual({
      B: expect.toSatisfy((ms: number) => ms <= 0),
      C: expect.toSatisfy((ms: number) => ms <= 500),
    });
    expect(counts).toMatchObject({ status: 'fulfilled', value: { published: 1 } });
    expect(b).toMatchObject({ status: 'fulfilled', value: { published: 1, leaseLost: 0 } });
    expect(c).toMatchObject({ status: 'rejected', reason: { name: 'OutboxDeadlineError' } });
    // C sent nothing: only A's and B's events reached the bus; its row goes back, attempt returned.
    expect(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.aggregateId).sort()).toEqual([
      'holder',
      'waits',
    ]);
    await unreturned.handBack(h.db.sql);
    expect((await rows()).find((r) => r.aggregate_id === 'deadline')).toMatchObject({
      published: false,
      attempts: 0,
      leased: false,
    });
    client.destroy();
  }, 45_000);
});

describe('back-pressure', () => {
  it('publishes every event and dead-letters none after 5 s of throttling on every request (max attempts 3)', async () => {
    await seed([event('t1'), event('t2'), event('t3'), event('t4'), event('t5')]);
    h.bus.setFaults({ throttleRate: 1 });
    const heal = setTimeout(() => h.bus.setFaults({}), 5_000);
    try {
      const result = await runRelay({
        sql: h.db.sql,
        client: testClient(h.bus.url),
        settings: testSettings({ maxAttempts: 3, backoffBaseMs: 10, backoffMaxMs: 200 }),
        untilEmpty: true,
      });
      expect(result.deadLettered).toBe(0);
      expect(result.published).toBe(5);
    } finally {
      clearTimeout(heal);
    }
    const state = await rows();
    expect(state.every((r) => r.published && !r.dead)).toBe(true);
    expect(h.bus.stats.throttled).toBeGreaterThan(0);
    expect(new Set(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.eventId)).size).toBe(5);
  }, 45_000);
});

describe('back-pressure, entry by entry', () => {
  it.each([
    ['ThrottlingException', 0, 1],
    ['InternalFailure', 1, 0],
  ])(
    'gives the attempt back to an entry refused with %s only if it is back-pressure',
    async (code, attempts, backPressure) => {
      await seed([event('entry')]);
      h.bus.setFaults({ entryFailureRate: 1, entryFailureCode: code });
      const counts = await relayOnce({
        sql: h.db.sql,
        client: testClient(h.bus.url),
        settings: testSettings({ backoffBaseMs: 60_000, backoffMaxMs: 60_000 }),
      });
      expect(counts).toMatchObject({ published: 0, retried: 1, backPressure, deadLettered: 0 });
      const [row] = await rows();
      expect(row).toMatchObject({ attempts, leased: false, published: false, dead: false });
      expect(row?.last_error).toMatch(new RegExp(`^${code}`));
    },
  );
});

describe('leases', () => {
  it('keeps the lease of a pass slower than its lease, and sends its whole claim', async () => {
    await seed(Array.from({ length: 6 }, (_, i) => event('slow', i)));
    h.bus.setFaults({ latencyMs: 1_500 });
    const pass = relayOnce({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings({ leaseSeconds: 5, perAggregateLimit: 6 }),
    });
    // Past the first lease's end the pass is still sending: nobody else may claim its rows.
    await sleep(6_500);
    const competitor = await claimBatch(h.db.sql, claimOptions(crypto.randomUUID()));
    expect(competitor).toHaveLength(0);
    const counts = await pass;
    expect(counts).toMatchObject({ claimed: 6, published: 6, released: 0, leaseLost: 0 });
    expect(h.bus.events).toHaveLength(6);
  }, 45_000);

  it('keeps the lease through one call longer than the lease, and marks what the bus accepted (issue 31, item 2)', async () => {
    // Before, a call got at most the lease less 3 s (2 s here): the bus's 7 s answer never came.
    await seed([event('long-call')]);
    h.bus.setFaults({ latencyMs: 7_000 });
    const pass = relayOnce(
      {
        sql: h.db.sql,
        client: testClient(h.bus.url),
        settings: testSettings({ leaseSeconds: 5 }),
        answerTimeout: new AnswerTimeout({ initialMs: 10_000 }),
      },
      5,
    );
    await sleep(6_000);
    expect(await claimBatch(h.db.sql, claimOptions(crypto.randomUUID()))).toHaveLength(0);
    const counts = await pass;
    expect(counts).toMatchObject({ claimed: 1, published: 1, backPressure: 0, leaseLost: 0 });
    expect(counts.leaseRenewals).toBeGreaterThanOrEqual(2);
    expect(h.bus.events).toHaveLength(1);
  }, 45_000);

  it('at the default settings, a relay killed mid-pass leaves its rows claimable again within 10 s', async () => {
    await seed(Array.from({ length: 300 }, (_, i) => event(`k${i % 30}`, i)));
    h.bus.setFaults({ latencyMs: 300 });
    const relay = spawn(
      process.execPath,
      [fileURLToPath(new URL('../../shared/relay/bin/outbox.js', import.meta.url)), 'relay', '--quiet'],
      {
        env: {
          PATH: process.env.PATH,
          DATABASE_URL: h.db.url,
          EVENT_BUS_NAME: 'test-bus',
          AWS_ENDPOINT_URL_EVENTBRIDGE: h.bus.url,
          AWS_REGION: 'us-east-1',
          AWS_ACCESS_KEY_ID: 'local',
          AWS_SECRET_ACCESS_KEY: 'local',
        },
        stdio: 'ignore',
      },
    );
    try {
      // Killed while it holds leased rows (and has sent some of them).
      const deadline = Date.now() + 20_000;
      while (h.bus.events.length < 20 && Date.now() < deadline) await sleep(50);
      expect(h.bus.events.length).toBeGreaterThanOrEqual(20);
    } finally {
      relay.kill('SIGKILL');
      await once(relay, 'exit');
    }
    const [held] = await h.db.sql<{ rows: number; wait: number }[]>`
      select count(*)::int as rows, extract(epoch from max(lease_expires_at) - now())::float8 as wait
      from outbox where published_at is null and lease_expires_at > now()`;
    expect(held?.rows).toBeGreaterThan(0);
    expect(held?.wait).toBeLessThanOrEqual(10);
  }, 45_000);
});
