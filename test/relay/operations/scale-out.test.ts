/**
 * Relays that scale with the backlog (issue 19): the monitor invokes extra relays through the real
 * Lambda client (against a local Invoke endpoint), and an extra relay drains and returns.
 */
import { LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type LocalLambda, startLocalLambda } from '../../../dev/local-lambda.ts';
import { createMonitorHandler } from '../../../functions/monitor/monitor-handler.ts';
import { createRelayHandler } from '../../../functions/relay/relay-handler.ts';
import {
  loadMonitorSettings,
  type MonitorSettings,
  OutboxValidationError,
} from '../../../shared/platform/index.ts';
import { enqueueMany } from '../../../shared/producer/index.ts';
import { SCALE_OUT_STAGGER_MS } from '../../../shared/relay/operations/scale-out.ts';
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
  const scaleOut = { relayFunctionName: 'outbox-relay', maxRelays: 4, backlogPerRelay: 10, forSeconds: 50 };

  it('invokes ceil(pending / backlogPerRelay) − 1 extra relays asynchronously, at most maxRelays − 1, spread out', async () => {
    const handler = createMonitorHandler({
      sql: h.db.sql,
      settings: monitorSettings(scaleOut),
      lambda: lambdaClient(),
    });
    await seed(25);
    const first = await handler({}, lambdaContext());
    expect(first.scaleOut).toMatchObject({ pending: 25, wanted: 3, started: 2, errors: [] });
    expect(lambda.invocations).toHaveLength(2);
    for (const i of lambda.invocations) {
      expect(i).toMatchObject({ functionName: 'outbox-relay', invocationType: 'Event' });
      const forSeconds = (i.payload as { scaleOut: { forSeconds: number } }).scaleOut.forSeconds;
      expect(forSeconds).toBeGreaterThanOrEqual(45);
      expect(forSeconds).toBeLessThanOrEqual(50);
    }
    const [a, b] = lambda.invocations;
    expect((b?.receivedAt ?? 0) - (a?.receivedAt ?? 0)).toBeGreaterThanOrEqual(SCALE_OUT_STAGGER_MS - 20);

    // A larger backlog asks for more, up to the bound.
    lambda.invocations.length = 0;
    await seed(100, 'b');
    const second = await handler({}, lambdaContext());
    expect(second.scaleOut).toMatchObject({ pending: 125, wanted: 4, started: 3 });
    expect(lambda.invocations).toHaveLength(3);

    // Drained: one relay (the scheduled one) is enough.
    lambda.invocations.length = 0;
    await h.db.sql`update outbox set published_at = now()`;
    const third = await handler({}, lambdaContext());
    expect(third.scaleOut).toMatchObject({ pending: 0, wanted: 1, started: 0 });
    expect(lambda.invocations).toHaveLength(0);
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
    expect(summary.scaleOut?.errors[0]).toMatch(/^TooManyRequestsException/);
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
    ).toEqual({ relayFunctionName: 'relay', maxRelays: 4, backlogPerRelay: 30_000, forSeconds: 50 });
    expect(() => loadMonitorSettings({ OUTBOX_MAX_RELAYS: '0' })).toThrow(/^OUTBOX_MAX_RELAYS: must be/);
    expect(() => loadMonitorSettings({ OUTBOX_RELAY_FUNCTION_NAME: 'a b' })).toThrow(
      /^OUTBOX_RELAY_FUNCTION_NAME: must be a Lambda function name or ARN/,
    );
  });
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
