/**
 * ConsumerLag (issue 49): the inbox emits, for every event it applies, the seconds from the
 * outbox's commit (`metadata.occurredAt`) to its own commit, as an EMF line with the consumer's
 * dimension; the OutboxConsumer alarms on its p99, on the very metric those lines make.
 */
import { randomUUID } from 'node:crypto';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { OutboxConsumer } from '../../infra/outbox-consumer.ts';
import { inbox } from '../../shared/consumer/index.ts';
import { OutboxConfigError } from '../../shared/platform/errors.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';
import { inlineFunction, NO_BUNDLING, relayStack } from '../support/synth.ts';

interface EmfLine {
  _aws: {
    CloudWatchMetrics: {
      Namespace: string;
      Dimensions: string[][];
      Metrics: { Name: string; Unit: string }[];
    }[];
  };
  [key: string]: unknown;
}

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 4 });
  await db.sql`create table applied (event_id text primary key)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, applied`;
});

function consumer(failing = false) {
  const lines: EmfLine[] = [];
  const handler = inbox(
    { sql: db.sql, consumer: 'billing', metrics: { write: (line) => lines.push(JSON.parse(line)) } },
    async (_event, { inbox: i }) => {
      await i.tx`insert into applied values (${i.metadata.eventId})`;
      if (failing) throw new Error('the handler failed (injected)');
      return 'applied';
    },
  );
  const lags = () => lines.filter((l) => 'ConsumerLag' in l);
  return { handler, lines, lags };
}

const eventAged = (ageMs: number) =>
  delivery({
    metadata: {
      eventId: randomUUID(),
      aggregateId: 'o-1',
      sequence: 1,
      occurredAt: new Date(Date.now() - ageMs).toISOString(),
    },
  }) as EventBridgeEvent<string, unknown>;

describe('ConsumerLag, emitted by the inbox', () => {
  it('an applied event emits one ConsumerLag in seconds from its commit in the outbox, per consumer', async () => {
    const c = consumer();
    const event = eventAged(2_500);
    await c.handler(event, lambdaContext());
    expect(c.lags()).toHaveLength(1);
    const line = c.lags()[0] as EmfLine;
    expect(line._aws.CloudWatchMetrics).toEqual([
      {
        Namespace: 'Outbox',
        Dimensions: [['consumer']],
        Metrics: [{ Name: 'ConsumerLag', Unit: 'Seconds' }],
      },
    ]);
    expect(line.consumer).toBe('billing');
    expect(line.ConsumerLag).toBeGreaterThanOrEqual(2.5);
    expect(line.ConsumerLag).toBeLessThan(30);
    expect(await db.sql`select * from applied`).toHaveLength(1);

    // A duplicate was applied before: no second value.
    await c.handler(event, lambdaContext());
    expect(c.lags()).toHaveLength(1);
  });

  it('an event whose handler failed emits none (it was not applied)', async () => {
    const c = consumer(true);
    await expect(c.handler(eventAged(1_000), lambdaContext())).rejects.toThrow(/injected/);
    expect(c.lags()).toHaveLength(0);
    expect(await db.sql`select * from applied`).toHaveLength(0);
  });
});

describe("the OutboxConsumer's ConsumerLag alarm watches what the inbox emits", () => {
  const synth = (extra: { consumerLagAlarmSeconds?: number } = {}) => {
    const { stack, relay, base } = relayStack(new App({ context: NO_BUNDLING }));
    const c = new OutboxConsumer(stack, 'Billing', {
      ...base,
      existingFunction: inlineFunction(stack, 'Own'),
      dashboard: relay.dashboard,
      ...extra,
    });
    return { c, t: Template.fromStack(stack) };
  };

  it('alarms on the p99 of the metric the EMF line makes: its namespace, name and dimension', async () => {
    const c = consumer();
    await c.handler(eventAged(100), lambdaContext());
    const line = c.lags()[0] as EmfLine;
    const emitted = line._aws.CloudWatchMetrics[0];
    const { t } = synth();
    const alarms = Object.values(t.findResources('AWS::CloudWatch::Alarm')).filter(
      (a) => (a as { Properties: { MetricName?: string } }).Properties.MetricName === 'ConsumerLag',
    ) as { Properties: Record<string, unknown> }[];
    expect(alarms).toHaveLength(1);
    const props = (alarms[0] as { Properties: Record<string, unknown> }).Properties;
    expect(props).toMatchObject({
      Namespace: emitted?.Namespace,
      MetricName: emitted?.Metrics[0]?.Name,
      Dimensions: (emitted?.Dimensions[0] ?? []).map((name) => ({ Name: name, Value: line[name] })),
      ExtendedStatistic: 'p99',
      Period: 300,
      Threshold: 300,
      ComparisonOperator: 'GreaterThanThreshold',
    });
    expect(String(props.AlarmDescription)).toMatch(/ConsumerLag.*relay/);
  });

  it('takes consumerLagAlarmSeconds, and refuses one that is not a positive number', () => {
    const { t } = synth({ consumerLagAlarmSeconds: 120 });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'ConsumerLag', Threshold: 120 });
    expect(() => synth({ consumerLagAlarmSeconds: 0 })).toThrow(OutboxConfigError);
    expect(() => synth({ consumerLagAlarmSeconds: 0 })).toThrow(/consumerLagAlarmSeconds/);
  });
});
