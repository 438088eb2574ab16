import { createServer, type Socket } from 'node:net';
import { Logger } from '@aws-lambda-powertools/logger';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createRelayHandler } from '../../functions/relay/relay-handler.ts';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { loadRelaySettings } from '../../shared/platform/config.ts';
import { OutboxConfigError } from '../../shared/platform/errors.ts';
import { enqueueMany } from '../../shared/producer/enqueue.ts';
import { createRelay } from '../../shared/relay/run-relay.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';
import { testClient, testSettings } from '../support/relay.ts';

let db: TestDatabase;
let bus: LocalBus;
beforeAll(async () => {
  db = await createTestDatabase();
  bus = await startLocalBus();
});
afterAll(async () => {
  await db?.drop();
  await bus?.close();
});

describe('relay Lambda handler', () => {
  it('relays until close to the deadline, then returns a summary', async () => {
    await db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: 300 }, (_, i) => ({
          type: 'T',
          source: 's',
          aggregateType: 'x',
          aggregateId: String(i),
          payload: {},
        })),
      ),
    );
    const handler = createRelayHandler({
      relay: createRelay({
        sql: db.sql,
        client: testClient(bus.url),
        settings: testSettings(),
      }),
    });
    const started = Date.now();
    // 9.5 s left: leases are capped to what fits, and claiming stops once less than 5 s + margin remain.
    const summary = await handler({}, lambdaContext(9_500));
    const took = Date.now() - started;
    expect(summary).toMatchObject({ published: 300, retried: 0, deadLettered: 0, stopReason: 'deadline' });
    expect(took).toBeGreaterThan(1_000);
    expect(took).toBeLessThan(9_500);
    expect(bus.events).toHaveLength(300);
  });

  it('does not claim when the remaining time cannot cover a lease', async () => {
    await db.sql.begin((tx) =>
      enqueueMany(tx, [{ type: 'T', source: 's', aggregateType: 'x', aggregateId: 'late', payload: {} }]),
    );
    const handler = createRelayHandler({
      relay: createRelay({
        sql: db.sql,
        client: testClient(bus.url),
        settings: testSettings(),
      }),
    });
    const summary = await handler({}, lambdaContext(6_000));
    expect(summary).toMatchObject({ claimed: 0, passes: 0, stopReason: 'deadline' });
    const [row] = await db.sql`select attempts, lease_token from outbox where aggregate_id = 'late'`;
    expect(row).toEqual({ attempts: 0, lease_token: null });
  });
});

describe('relay Lambda handler, the bus unreachable', () => {
  it('logs why events fail and counts the reasons in its summary (docs/operations.md#lag, no route to EventBridge)', async () => {
    await db.sql`truncate outbox, outbox_aggregate`;
    // A bus endpoint that takes the connection and never answers: what a VPC without a route to
    // EventBridge looks like from the relay (every attempt times out).
    const sockets = new Set<Socket>();
    const silent = createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as { port: number };
    try {
      await db.sql.begin((tx) =>
        enqueueMany(
          tx,
          Array.from({ length: 3 }, (_, i) => ({
            type: 'T',
            source: 's',
            aggregateType: 'noroute',
            aggregateId: String(i),
            payload: {},
          })),
        ),
      );
      const logger = new Logger({ serviceName: 'outbox-relay', logLevel: 'SILENT' });
      const warn = vi.spyOn(logger, 'warn');
      const info = vi.spyOn(logger, 'info');
      const handler = createRelayHandler({
        logger,
        relay: createRelay({
          sql: db.sql,
          client: testClient(`http://127.0.0.1:${port}`),
          settings: testSettings(),
        }),
      });
      const summary = await handler({}, lambdaContext(9_500));
      expect(summary).toMatchObject({ published: 0, deadLettered: 0 });
      expect(summary.backPressure).toBeGreaterThan(0);
      const [failure, ...others] = summary.failures ?? [];
      expect(others).toEqual([]);
      expect(failure?.reason).toMatch(/^PutEventsTimeoutError: no answer from the bus/);
      expect(failure).toMatchObject({ count: summary.retried, deadLettered: 0 });
      // Logged once per reason, when first seen, with the reason as last_error keeps it.
      const warned = warn.mock.calls.filter(([message]) => message === 'publish failed');
      expect(warned).toHaveLength(1);
      expect(warned[0]?.[1]).toMatchObject({ reason: failure?.reason, outcome: 'will retry' });
      const [row] = await db.sql<{ last_error: string }[]>`
        select last_error from outbox where aggregate_type = 'noroute' limit 1`;
      expect(row?.last_error).toBe(failure?.reason);
      // The summary line carries them too.
      expect(info.mock.calls.find(([m]) => m === 'relay invocation finished')?.[1]).toMatchObject({
        summary: { failures: [{ reason: failure?.reason }] },
      });
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('lists no failures when none happened', async () => {
    await db.sql`truncate outbox, outbox_aggregate`;
    await db.sql.begin((tx) =>
      enqueueMany(tx, [{ type: 'T', source: 's', aggregateType: 'fine', aggregateId: '1', payload: {} }]),
    );
    const handler = createRelayHandler({
      relay: createRelay({ sql: db.sql, client: testClient(bus.url), settings: testSettings() }),
    });
    const summary = await handler({}, lambdaContext(9_000));
    expect(summary.published).toBe(1);
    expect(summary.failures).toBeUndefined();
  });
});

describe('relay Lambda handler across invocations', () => {
  it('replaces connections that were terminated between invocations, without hanging', async () => {
    const { openPool } = await import('../../shared/platform/db.ts');
    await db.sql`truncate outbox, outbox_aggregate`;
    const pool = openPool({ url: db.url, max: 2, env: {}, applicationName: 'relay-frozen' });
    try {
      const handler = createRelayHandler({
        relay: createRelay({
          sql: pool,
          client: testClient(bus.url),
          settings: testSettings(),
        }),
      });
      const enqueue = (id: string) =>
        db.sql.begin((tx) =>
          enqueueMany(tx, [
            { type: 'T', source: 's', aggregateType: 'frozen', aggregateId: id, payload: {} },
          ]),
        );
      await enqueue('before');
      expect((await handler({}, lambdaContext(9_000))).published).toBe(1);
      // Several times over: a terminated connection's driver state used to make the pool's end()
      // wait forever about one time in six (a query already rejected stayed recorded as running).
      for (let i = 0; i < 5; i++) {
        // While the function is "frozen", the server (or a NAT, or RDS Proxy) drops its connections.
        const [terminated] = await db.sql`
          select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name = 'relay-frozen'`;
        expect(terminated?.n).toBeGreaterThan(0);
        await enqueue(`after-${i}`);
        const started = Date.now();
        const summary = await handler({}, lambdaContext(9_000));
        expect(summary.published).toBe(1);
        expect(Date.now() - started).toBeLessThan(5_000);
      }
    } finally {
      const ending = Date.now();
      await pool.end(2);
      expect(Date.now() - ending).toBeLessThan(5_000);
    }
  });
});

describe('relay Lambda connections', () => {
  it('reuses its connections across warm invocations a schedule gap apart', async () => {
    const { connect } = await import('../../shared/platform/db.ts');
    const sql = connect({ url: db.url, max: 3, env: {}, applicationName: 'relay-warm' });
    const sessions = () =>
      db.sql<{ pid: number; started: Date }[]>`
        select pid, backend_start as started from pg_stat_activity
        where application_name = 'relay-warm' and datname = current_database()`;
    try {
      const handler = createRelayHandler({
        relay: createRelay({ sql, client: testClient(bus.url), settings: testSettings() }),
      });
      const enqueue = (id: string) =>
        db.sql.begin((tx) =>
          enqueueMany(tx, [{ type: 'T', source: 's', aggregateType: 'warm', aggregateId: id, payload: {} }]),
        );
      await enqueue('1');
      expect((await handler({}, lambdaContext(8_100))).published).toBe(1);
      const first = await sessions();
      expect(first.length).toBeGreaterThan(0);
      // Frozen between invocations for longer than the driver's old 20 s idle timeout.
      await new Promise((resolve) => setTimeout(resolve, 21_000));
      await enqueue('2');
      const secondStarted = new Date();
      expect((await handler({}, lambdaContext(8_100))).published).toBe(1);
      const second = await sessions();
      // No login during the warm invocation: every connection it used was already open.
      expect(second.filter((s) => s.started >= secondStarted)).toEqual([]);
      expect(second.map((s) => s.pid).sort()).toEqual(first.map((s) => s.pid).sort());
      // And the pool recycles them before an IAM token (15 minutes) would run out.
      expect(sql.options.idle_timeout).toBeGreaterThan(60);
      expect(sql.options.max_lifetime).toBeLessThan(15 * 60);
    } finally {
      await sql.end({ timeout: 2 });
    }
  }, 60_000);
});

describe('relay configuration', () => {
  it('applies the documented defaults', () => {
    expect(loadRelaySettings({ EVENT_BUS_NAME: 'bus' })).toEqual({
      eventBusName: 'bus',
      batchSize: 100,
      leaseSeconds: 8,
      maxAttempts: 10,
      backoffBaseMs: 1_000,
      backoffMaxMs: 300_000,
      publishConcurrency: 4,
      pipelineDepth: 2,
      maxRequestBytes: 1_048_576,
      perAggregateLimit: 10,
      ordering: 'aggregate',
      deadLetterPolicy: 'continue',
      pollIntervalMs: 200,
      idleReturnSeconds: 0,
      metricNamespace: 'Outbox',
      publishedRetentionDays: 7,
    });
  });

  it.each([
    [{}, 'EVENT_BUS_NAME', /is required/],
    [{ EVENT_BUS_NAME: 'b', OUTBOX_BATCH_SIZE: '0' }, 'OUTBOX_BATCH_SIZE', /\(got "0"\)/],
    [{ EVENT_BUS_NAME: 'b', OUTBOX_LEASE_SECONDS: '2.5' }, 'OUTBOX_LEASE_SECONDS', /\(got "2.5"\)/],
    [{ EVENT_BUS_NAME: 'b', OUTBOX_ORDERING: 'fifo' }, 'OUTBOX_ORDERING', /\(got "fifo"\)/],
    [
      { EVENT_BUS_NAME: 'b', OUTBOX_MAX_REQUEST_BYTES: '2000000' },
      'OUTBOX_MAX_REQUEST_BYTES',
      /\(got "2000000"\)/,
    ],
  ])('rejects %o naming %s', (env, variable, message) => {
    let caught: unknown;
    try {
      loadRelaySettings(env);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(OutboxConfigError);
    expect((caught as OutboxConfigError).variable).toBe(variable);
    expect((caught as Error).message).toMatch(new RegExp(`^${variable}: `));
    expect((caught as Error).message).toMatch(message);
  });
});
