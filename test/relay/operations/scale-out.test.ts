/**
 * Relays that scale with the backlog (issue 19): the monitor invokes extra relays through the real
 * Lambda client (against a local Invoke endpoint), and an extra relay drains and returns.
 */
import { LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMonitorHandler } from '../../../functions/monitor/monitor-handler.ts';
import { createRelayHandler } from '../../../functions/relay/relay-handler.ts';
import { type LocalLambda, startLocalLambda } from '../../../shared/local/lambda.ts';
import { connect } from '../../../shared/platform/db.ts';
import {
  loadMonitorSettings,
  type MonitorSettings,
  OutboxValidationError,
} from '../../../shared/platform/index.ts';
import { enqueueMany } from '../../../shared/producer/index.ts';
import { getBacklogDetail } from '../../../shared/relay/operations/index.ts';
import { SCALE_OUT_STAGGER_MS, type ScaleOutSettings } from '../../../shared/relay/operations/scale-out.ts';
import { createRelay } from '../../../shared/relay/run-relay.ts';
import { useHarness } from '../../support/harness.ts';
import { lambdaContext } from '../../support/lambda.ts';
import { testClient, testSettings } from '../../support/relay.ts';

const h = useHarness({ max: 8 });
const DAY = 86_400;

let lambda: LocalLambda;
beforeAll(async () => {
  lambda = await startLocalLambda();
});
afterAll(() => lambda.close());
beforeEach(() => {
  lambda.invocations.length = 0;
  lambda.throttle = false;
});

const seed = (n: number, prefix = 'a') =>
  h.db.sql.begin((tx) =>
    enqueueMany(
      tx,
      Array.from({ length: n }, (_, i) => ({
        type: 'OrderPlaced',
        source: 'shop.orders',
        aggregateType: 'order',
        aggregateId: `${prefix}${i}`,
        payload: { i },
      })),
    ),
  );

function monitorSettings(scaleOut: MonitorSettings['scaleOut']): MonitorSettings {
  return {
    publishedRetentionSeconds: 7 * DAY,
    deadLetterRetentionSeconds: 30 * DAY,
    inboxRetentionSeconds: 30 * DAY,
    idempotencyKeyRetentionSeconds: 30 * DAY,
    pruneBatchSize: 100,
    pruneTimeBudgetMs: 5_000,
    metricNamespace: 'OutboxTest',
    scaleOut,
  };
}

const lambdaClient = () =>
  new LambdaClient({
    endpoint: lambda.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    maxAttempts: 1,
  });

describe('the monitor scales the relays out', () => {
  const scaleOut = {
    relayFunctionName: 'outbox-relay',
    maxRelays: 4,
    backlogPerRelay: 10,
    forSeconds: 50,
    ordering: 'aggregate' as const,
    deadLetterPolicy: 'continue' as const,
  };

  it('invokes ceil(pending / backlogPerRelay) − 1 extra relays asynchronously, at most maxRelays − 1, spread out', async () => {
    const handler = createMonitorHandler({
      sql: h.db.sql,
      settings: monitorSettings(scaleOut),
      lambda: lambdaClient(),
    });
    await seed(25);
    const first = await handler({}, lambdaContext());
    expect(first.scaleOut).toMatchObject({ claimable: 25, wanted: 3, started: 2, errors: [] });
    expect(lambda.invocations).toHaveLength(2);
    for (const i of lambda.invocations) {
      expect(i).toMatchObject({ functionName: 'outbox-relay', invocationType: 'Event' });
      const forSeconds = (i.payload as { scaleOut: { forSeconds: number } }).scaleOut.forSeconds;
      expect(forSeconds).toBeGreaterThanOrEqual(45);
      expect(forSeconds).toBeLessThanOrEqual(50);
    }

    // A larger backlog asks for more, up to the bound.
    lambda.invocations.length = 0;
    await seed(100, 'b');
    const second = await handler({}, lambdaContext());
    // 125 pending, counted up to what maxRelays needs: (4 − 1) × 10 + 1.
    expect(second.scaleOut).toMatchObject({ claimable: 31, wanted: 4, started: 3 });
    expect(lambda.invocations).toHaveLength(3);
    // Sent SCALE_OUT_STAGGER_MS apart (the client warm from the first run: no connection set-up
    // delays the first one).
    const [a, , c] = lambda.invocations;
    expect((c?.receivedAt ?? 0) - (a?.receivedAt ?? 0)).toBeGreaterThanOrEqual(2 * SCALE_OUT_STAGGER_MS - 40);

    // Drained: one relay (the scheduled one) is enough.
    lambda.invocations.length = 0;
    await h.db.sql`update outbox set published_at = now()`;
    const third = await handler({}, lambdaContext());
    expect(third.scaleOut).toMatchObject({ claimable: 0, wanted: 1, started: 0 });
    expect(lambda.invocations).toHaveLength(0);
  }, 30_000);

  it('starts the extra relays before it prunes: a slow prune does not hold a backlog to one relay (issue 48)', async () => {
    // Pruning runs for up to its time budget (20 s by default) on a large published history, and
    // a DELETE waits on a row another session holds; the backlog's relays must not wait for it.
    const handler = createMonitorHandler({
      sql: h.db.sql,
      settings: monitorSettings(scaleOut),
      lambda: lambdaClient(),
    });
    await seed(5, 'old');
    await h.db.sql`update outbox set published_at = now() - interval '8 days'`;
    await seed(40, 'new');
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked = () => {};
    const isLocked = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const holder = h.db.sql.begin(async (tx) => {
      await tx`select id from outbox where published_at is not null for update`;
      locked();
      await held;
    });
    await isLocked;
    const run = handler({}, lambdaContext());
    try {
      const deadline = Date.now() + 3_000;
      while (lambda.invocations.length < 3 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      // While the prune still waits on the held rows, the extras were started.
      expect(lambda.invocations).toHaveLength(3);
    } finally {
      release();
      await holder;
    }
    const summary = await run;
    expect(summary.scaleOut).toMatchObject({ wanted: 4, started: 3 });
    expect(summary.prune).toMatchObject({ publishedDeleted: 5 });
  }, 30_000);

  it('reports a throttled invocation and still emits its metrics (nothing thrown)', async () => {
    const handler = createMonitorHandler({
      sql: h.db.sql,
      settings: monitorSettings(scaleOut),
      lambda: lambdaClient(),
    });
    await seed(15);
    lambda.throttle = true;
    const summary = await handler({}, lambdaContext());
    expect(summary.scaleOut).toMatchObject({ wanted: 2, started: 0 });
    expect(summary.scaleOut && 'errors' in summary.scaleOut && summary.scaleOut.errors[0]).toMatch(
      /^TooManyRequestsException/,
    );
  });

  it('starts nothing when too little of its minute is left for an extra relay', async () => {
    const handler = createMonitorHandler({
      sql: h.db.sql,
      settings: monitorSettings({ ...scaleOut, forSeconds: 10 }),
      lambda: lambdaClient(),
    });
    await seed(40);
    // Pruning and the status took some of the 10 s: under the 10 s minimum, nothing is started.
    const summary = await handler({}, lambdaContext());
    expect(summary.scaleOut).toMatchObject({ wanted: 4, started: 0 });
    expect(lambda.invocations).toHaveLength(0);
  });

  it('reads its scale-out settings from the environment, and names a malformed one', () => {
    expect(loadMonitorSettings({}).scaleOut).toBeUndefined();
    expect(loadMonitorSettings({ OUTBOX_RELAY_FUNCTION_NAME: 'relay' }).scaleOut).toBeUndefined();
    expect(
      loadMonitorSettings({ OUTBOX_RELAY_FUNCTION_NAME: 'relay', OUTBOX_MAX_RELAYS: '4' }).scaleOut,
    ).toEqual({
      relayFunctionName: 'relay',
      maxRelays: 4,
      backlogPerRelay: 30_000,
      forSeconds: 50,
      ordering: 'aggregate',
      deadLetterPolicy: 'continue',
    });
    expect(
      loadMonitorSettings({
        OUTBOX_RELAY_FUNCTION_NAME: 'relay',
        OUTBOX_MAX_RELAYS: '4',
        OUTBOX_DEAD_LETTER_POLICY: 'block',
      }).scaleOut,
    ).toMatchObject({ ordering: 'aggregate', deadLetterPolicy: 'block' });
    expect(() => loadMonitorSettings({ OUTBOX_MAX_RELAYS: '0' })).toThrow(/^OUTBOX_MAX_RELAYS: must be/);
    expect(() => loadMonitorSettings({ OUTBOX_RELAY_FUNCTION_NAME: 'a b' })).toThrow(
      /^OUTBOX_RELAY_FUNCTION_NAME: must be a Lambda function name or ARN/,
    );
  });
});

describe('the monitor scales out on claimable work only (issue 31)', () => {
  const scaleOut = {
    relayFunctionName: 'outbox-relay',
    maxRelays: 4,
    backlogPerRelay: 100,
    forSeconds: 50,
    ordering: 'aggregate' as const,
    deadLetterPolicy: 'block' as const,
  };
  const monitor = (settings: Partial<ScaleOutSettings> = {}) =>
    createMonitorHandler({
      sql: h.db.sql,
      settings: monitorSettings({ ...scaleOut, ...settings }),
      lambda: lambdaClient(),
    });
  /** One aggregate's `n` events, the first of them dead-lettered (not discarded). */
  const behindDeadLetter = async (n: number, aggregateId = 'held') => {
    await h.db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: n + 1 }, (_, i) => ({
          type: 'OrderPlaced',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId,
          payload: { i },
        })),
      ),
    );
    await h.db.sql`
      update outbox set dead_lettered_at = now(), last_error = 'InvalidArgument: bad'
      where aggregate_id = ${aggregateId} and sequence = 1`;
  };

  it('starts no extra relay for 300 rows held back behind a dead letter under block', async () => {
    await behindDeadLetter(300);
    const summary = await monitor()({}, lambdaContext());
    expect(summary.status).toMatchObject({ pending: 300 });
    expect(summary.scaleOut).toMatchObject({ claimable: 0, wanted: 1, started: 0 });
    expect(lambda.invocations).toHaveLength(0);
    // Another aggregate's rows still count; a discarded dead letter holds nothing back.
    await seed(5);
    expect((await monitor()({}, lambdaContext())).scaleOut).toMatchObject({ claimable: 5, started: 0 });
    await h.db.sql`update outbox set discarded_at = now() where dead_lettered_at is not null`;
    expect((await monitor()({}, lambdaContext())).scaleOut).toMatchObject({ claimable: 301, started: 3 });
  });

  it('counts the rows behind a dead letter under continue, where the claim takes them', async () => {
    // Three aggregates: one aggregate's rows are work for one relay (issue 48).
    for (const id of ['held-1', 'held-2', 'held-3']) await behindDeadLetter(100, id);
    const summary = await monitor({ deadLetterPolicy: 'continue' })({}, lambdaContext());
    expect(summary.scaleOut).toMatchObject({ claimable: 300, wanted: 3, started: 2 });
  });

  it('leaves rows in backoff and leased rows out; counts those whose backoff or lease has ended', async () => {
    await seed(400);
    await h.db.sql`
      update outbox set available_at = now() + interval '5 minutes', last_error = 'InternalFailure: x'
      where id in (select id from outbox order by id limit 150)`;
    await h.db.sql`
      update outbox set lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 seconds'
      where id in (select id from outbox order by id desc limit 150)`;
    // 100 available and not leased; a lease that has expired is claimable again.
    await h.db.sql`
      update outbox set lease_token = gen_random_uuid(), lease_expires_at = now() - interval '1 second'
      where id in (select id from outbox where available_at <= now() and lease_token is null order by id limit 20)`;
    const summary = await monitor()({}, lambdaContext());
    expect(summary.status).toMatchObject({ pending: 400, inFlight: 150 });
    expect(summary.scaleOut).toMatchObject({ claimable: 100, wanted: 1, started: 0 });
    expect(lambda.invocations).toHaveLength(0);
  });

  it('starts none while the bus throttles: rows in backoff after a ThrottlingException', async () => {
    await seed(1_000);
    await h.db.sql`
      update outbox set available_at = now() + interval '20 seconds',
        last_error = 'ThrottlingException: Rate exceeded'
      where id in (select id from outbox order by id limit 5)`;
    const summary = await monitor()({}, lambdaContext());
    // Counted up to what maxRelays needs: (4 − 1) × 100 + 1.
    expect(summary.scaleOut).toMatchObject({ claimable: 301, throttled: true, wanted: 1, started: 0 });
    expect(lambda.invocations).toHaveLength(0);
    // The backoff over (published meanwhile, or claimable again): scale-out resumes.
    await h.db.sql`update outbox set available_at = now() where last_error like 'Throttling%'`;
    const next = await monitor()({}, lambdaContext());
    expect(next.scaleOut).toMatchObject({ claimable: 301, throttled: false, wanted: 4, started: 3 });
  });

  it('reaches maxRelays 100 in one run: 99 extras within its 10 s budget', async () => {
    await seed(200);
    const started = performance.now();
    const summary = await monitor({ maxRelays: 100, backlogPerRelay: 1 })({}, lambdaContext());
    expect(summary.scaleOut).toMatchObject({ wanted: 100, started: 99, errors: [] });
    expect(lambda.invocations).toHaveLength(99);
    expect(performance.now() - started).toBeLessThan(15_000);
    // Spread out all the same: at least 100 ms apart (a relay's 5 logins at 50 a second at most).
    const at = lambda.invocations.map((i) => i.receivedAt).sort((a, b) => a - b);
    expect((at.at(-1) ?? 0) - (at[0] ?? 0)).toBeGreaterThanOrEqual(98 * 100 - 200);
    // Each extra ends when the first one does: forSeconds counts from the monitor's start.
    const last = lambda.invocations.at(-1)?.payload as { scaleOut: { forSeconds: number } };
    expect(last.scaleOut.forSeconds).toBeLessThanOrEqual(41);
  }, 30_000);

  it('still scales out, and emits its other figures, when the status statement fails', async () => {
    await seed(300);
    // The monitor's pool with a 1 s statement timeout, and the status's inbox count held up by a lock.
    const sql = connect({ url: h.db.url, max: 2, env: { OUTBOX_DB_STATEMENT_TIMEOUT_MS: '1000' } });
    const blocker = connect({ url: h.db.url, max: 1, env: {} });
    let release = () => {};
    const held = blocker.begin(async (tx) => {
      await tx`lock table inbox_message in access exclusive mode`;
      await new Promise<void>((r) => {
        release = r;
      });
    });
    try {
      await new Promise((r) => setTimeout(r, 200));
      const handler = createMonitorHandler({
        sql,
        settings: monitorSettings(scaleOut),
        lambda: lambdaClient(),
      });
      await expect(handler({}, lambdaContext())).rejects.toThrow(/status failed: .*statement timeout/);
      expect(lambda.invocations).toHaveLength(2);
    } finally {
      release();
      await held;
      await blocker.end();
      await sql.end();
    }
  }, 30_000);
});

describe('an extra relay', () => {
  const relay = () =>
    createRelayHandler({
      relay: createRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings: testSettings() }),
    });

  it('relays until nothing is pending, then returns long before its time is up', async () => {
    await seed(60);
    const started = performance.now();
    const summary = await relay()({ scaleOut: { forSeconds: 50 } }, lambdaContext(60_000));
    expect(summary).toMatchObject({ published: 60, stopReason: 'empty', scaleOut: true });
    expect(performance.now() - started).toBeLessThan(20_000);
    expect(h.bus.events).toHaveLength(60);
  });

  it('returns after forSeconds less the end margin when something stays pending', async () => {
    await seed(1);
    // Pending but not claimable (in backoff): the relay polls, and stops at its own deadline.
    await h.db.sql`update outbox set available_at = now() + interval '1 hour'`;
    const started = performance.now();
    const summary = await relay()({ scaleOut: { forSeconds: 11 } }, lambdaContext(60_000));
    expect(summary).toMatchObject({ published: 0, stopReason: 'deadline' });
    expect(performance.now() - started).toBeLessThan(11_000);
  });

  it('refuses a malformed scale-out payload, naming the field, before claiming anything', async () => {
    await seed(3);
    const handler = relay();
    await expect(handler({ scaleOut: { forSeconds: 'soon' } }, lambdaContext())).rejects.toThrow(
      OutboxValidationError,
    );
    await expect(handler({ scaleOut: 5 }, lambdaContext())).rejects.toThrow(/^scaleOut: must be an object/);
    await expect(handler({ scaleOut: { forSeconds: 0 } }, lambdaContext())).rejects.toThrow(
      /^scaleOut.forSeconds: must be a whole number/,
    );
    const [row] = await h.db.sql<{ leased: number }[]>`
      select count(*)::int as leased from outbox where lease_token is not null or attempts > 0`;
    expect(row?.leased).toBe(0);
    expect(h.bus.events).toHaveLength(0);
  });
});

describe('scale-out counts the aggregate heads extra relays could claim (issue 48)', () => {
  const settings = {
    maxRelays: 4,
    backlogPerRelay: 100,
    ordering: 'aggregate' as const,
    deadLetterPolicy: 'continue' as const,
  };
  /** `aggregates` hot aggregates of `perAggregate` events each. */
  const hot = (aggregates: number, perAggregate: number) =>
    h.db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: aggregates * perAggregate }, (_, i) => ({
          type: 'OrderPlaced',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId: `hot-${i % aggregates}`,
          payload: { i },
        })),
      ),
    );

  it('wants one relay for a backlog of one aggregate, which only one relay at a time can claim', async () => {
    // Issue 48: 100,000 events of one aggregate scaled to 4 relays (the rows counted), and the
    // extras published 0 of them. Here 2,000 rows, 100 per relay.
    await hot(1, 2_000);
    const detail = await getBacklogDetail(h.db.sql, settings);
    expect(detail.scaleOut).toMatchObject({ claimable: 301, heads: 1, relays: 1 });
    const handler = createMonitorHandler({
      sql: h.db.sql,
      settings: monitorSettings({ relayFunctionName: 'outbox-relay', forSeconds: 50, ...settings }),
      lambda: lambdaClient(),
    });
    expect((await handler({}, lambdaContext())).scaleOut).toMatchObject({ wanted: 1, started: 0 });
    expect(lambda.invocations).toHaveLength(0);
  });

  it('wants at most one relay per hot aggregate, and none for an aggregate whose head is leased', async () => {
    await hot(2, 1_000);
    expect((await getBacklogDetail(h.db.sql, settings)).scaleOut).toMatchObject({ heads: 2, relays: 2 });
    await hot(2, 1_000);
    expect((await getBacklogDetail(h.db.sql, settings)).scaleOut).toMatchObject({ heads: 2, relays: 2 });
    await h.db.sql`truncate outbox, outbox_aggregate`;
    await hot(4, 1_000);
    expect((await getBacklogDetail(h.db.sql, settings)).scaleOut).toMatchObject({ heads: 4, relays: 4 });
    // A relay holds hot-0's head (and a few of its successors): the rest of hot-0 is no one else's.
    await h.db.sql`
      update outbox set lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 seconds'
      where aggregate_id = 'hot-0' and sequence <= 5`;
    expect((await getBacklogDetail(h.db.sql, settings)).scaleOut).toMatchObject({ heads: 3, relays: 3 });
  });

  it('counts the heads behind the first rows too, when the row count stops early', async () => {
    // The rehearsal's backlog (OUTBOX_BACKLOG_PER_RELAY=1, so the row count stops at 4): the first
    // 4 pending rows were one aggregate's, 7 more aggregates behind them, and the heads of those 4
    // rows alone wanted 1 relay. The heads are counted over the first HEADS_SCAN_ROWS rows.
    await hot(1, 10);
    await hot(8, 2);
    const detail = await getBacklogDetail(h.db.sql, { ...settings, backlogPerRelay: 1 });
    expect(detail.scaleOut).toMatchObject({ claimable: 4, heads: 4, relays: 4 });
  });

  it('counts rows, not aggregates, under OUTBOX_ORDERING=none', async () => {
    await hot(1, 2_000);
    const detail = await getBacklogDetail(h.db.sql, { ...settings, ordering: 'none' });
    expect(detail.scaleOut).toMatchObject({ claimable: 301, relays: 4 });
    expect(detail.scaleOut.heads).toBeUndefined();
  });
});
