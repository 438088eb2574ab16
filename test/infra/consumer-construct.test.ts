import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Duration, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as events from 'aws-cdk-lib/aws-events';
import type { Construct } from 'constructs';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { OrderPlaced } from '../../examples/billing/events.ts';
import type { OutboxConsumerProps } from '../../infra/consumer-props.ts';
import { OutboxConsumer } from '../../infra/outbox-consumer.ts';
import { InboxOptionsError } from '../../shared/consumer/errors.ts';
import { inbox } from '../../shared/consumer/inbox.ts';
import type { Sql } from '../../shared/platform/db.ts';
import { OutboxConfigError } from '../../shared/platform/errors.ts';
import { inlineFunction, NO_BUNDLING, relayStack, useApps } from '../support/synth.ts';

const newApp = useApps('outbox-consumer-test-');
const entry = new URL('../../examples/billing/handler.ts', import.meta.url).pathname;
const repoRoot = new URL('../..', import.meta.url).pathname;

/** The failure queues' alarms give the replay command with both queue URLs and the function filled in, within CloudWatch's 1,024 characters. */
function expectReplayCommandInAlarms(t: Template, consumer: OutboxConsumer): void {
  const idOf = (c: { node: { defaultChild?: unknown } }) =>
    Stack.of(consumer).getLogicalId(c.node.defaultChild as never);
  for (const alarm of [consumer.alarms.undelivered, consumer.alarms.failed]) {
    const description = t.toJSON().Resources[idOf(alarm)].Properties.AlarmDescription as {
      'Fn::Join': [string, unknown[]];
    };
    const parts = description['Fn::Join'][1];
    const text = parts.map((p) => (typeof p === 'string' ? p : JSON.stringify(p))).join('');
    expect(text).toMatch(
      /outbox inbox queue list --queue-url .* --queue-url .*; then outbox inbox queue replay --queue-url /,
    );
    expect(text).toContain(`{"Ref":"${idOf(consumer.failedEventsQueue)}"}`);
    expect(text).toContain(`{"Ref":"${idOf(consumer.deadLetterQueue)}"}`);
    expect(text).toContain(
      `--consumer billing --function-name {"Ref":"${idOf(consumer.function as never)}"}`,
    );
    // CloudWatch takes at most 1,024 characters: the text, 4 queue URLs of at most 130 (an
    // 80-character name, SQS's longest, after https://sqs.<region>.amazonaws.com/<account>/) and
    // a function name of at most 64.
    const literal = parts.filter((p) => typeof p === 'string').join('').length;
    expect(literal + 4 * 130 + 64).toBeLessThanOrEqual(1024);
  }
}

describe('OutboxConsumer, direct topology (bundled from an entry, locally)', () => {
  let t: Template;
  let consumer: OutboxConsumer;
  let assetDir: string | undefined;
  beforeAll(() => {
    const app = newApp();
    const { stack, base } = relayStack(app);
    consumer = new OutboxConsumer(stack, 'Billing', {
      ...base,
      entry,
      functionProps: { projectRoot: repoRoot, depsLockFilePath: `${repoRoot}package-lock.json` },
    });
    const assembly = app.synth();
    t = Template.fromStack(stack);
    const fn = t.findResources('AWS::Lambda::Function', {
      Properties: { Description: 'Inbox consumer billing' },
    });
    // The function's code is the asset `<hash>.zip`, staged in the cloud assembly as `asset.<hash>`.
    const code = (Object.values(fn)[0] as { Properties: { Code: { S3Key: string } } } | undefined)?.Properties
      .Code;
    assetDir = code ? join(assembly.directory, `asset.${code.S3Key.replace(/\.zip$/, '')}`) : undefined;
  }, 180_000);

  it('bundles the entry with esbuild on this machine (no Docker) for Node.js 24', () => {
    expect(assetDir && existsSync(join(assetDir, 'index.mjs')), 'the bundled handler').toBe(true);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Description: 'Inbox consumer billing',
      Runtime: 'nodejs24.x',
      Architectures: ['arm64'],
    });
  });

  it("matches the events' sources and detail-types on the relay's bus", () => {
    t.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: {
        source: ['demo.shop', 'outbox.heartbeat'],
        'detail-type': ['OrderPlaced', 'OutboxHeartbeat'],
      },
      EventBusName: Match.anyValue(),
    });
  });

  it('retries delivery into Lambda, then dead-letters it to an encrypted queue', () => {
    const dlq = Stack.of(consumer).getLogicalId(consumer.deadLetterQueue.node.defaultChild as never);
    t.hasResourceProperties('AWS::Events::Rule', {
      Targets: [
        Match.objectLike({
          RetryPolicy: { MaximumRetryAttempts: 185, MaximumEventAgeInSeconds: 86_400 },
          DeadLetterConfig: { Arn: { 'Fn::GetAtt': [dlq, 'Arn'] } },
        }),
      ],
    });
    expect(t.toJSON().Resources[dlq].Properties).toMatchObject({ SqsManagedSseEnabled: true });
  });

  it('retries a failed handler twice, then sends the record to the encrypted on-failure queue', () => {
    const failed = Stack.of(consumer).getLogicalId(consumer.failedEventsQueue.node.defaultChild as never);
    t.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      MaximumRetryAttempts: 2,
      MaximumEventAgeInSeconds: 21_600,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [failed, 'Arn'] } } },
    });
    expect(t.toJSON().Resources[failed].Properties).toMatchObject({ SqsManagedSseEnabled: true });
  });

  it('derives the inbox settings from the delivery and hands them to the function with its login', () => {
    expect(consumer.inboxSettings).toEqual({ retryWindowSeconds: 180, maxEventAgeSeconds: 21_600 });
    t.hasResourceProperties('AWS::Lambda::Function', {
      Description: 'Inbox consumer billing',
      Environment: {
        Variables: Match.objectLike({
          OUTBOX_INBOX_CONSUMER: 'billing',
          OUTBOX_INBOX_RETRY_WINDOW_SECONDS: '180',
          OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS: '21600',
          PGUSER: 'outbox_consumer_billing',
          PGDATABASE: 'shop',
          PGHOST: 'p.proxy.eu-west-1.rds.amazonaws.com',
          OUTBOX_DB_IAM_AUTH: 'true',
          OUTBOX_DB_POOLER: 'transaction',
        }),
      },
    });
  });

  it('lets the function log in as its own role only, on the proxy', () => {
    const statements = Object.values(t.findResources('AWS::IAM::Policy')).flatMap(
      (p) =>
        (p as { Properties: { PolicyDocument: { Statement: { Action: unknown; Resource: unknown }[] } } })
          .Properties.PolicyDocument.Statement,
    );
    const connect = statements.filter((s) => [s.Action].flat().includes('rds-db:connect'));
    expect(JSON.stringify(connect)).toContain('/outbox_consumer_billing');
  });

  it('alarms on the dead-letter queue, the on-failure queue, function errors and parked events', () => {
    expect(Object.keys(consumer.alarms).sort()).toEqual([
      'consumerLag',
      'errors',
      'failed',
      'heartbeat',
      'parked',
      'queueAge',
      'undelivered',
    ]);
    expect(consumer.alarms.queueAge).toBeUndefined();
    const alarms = Object.keys(t.findResources('AWS::CloudWatch::Alarm')).filter((id) =>
      id.startsWith('Billing'),
    );
    expect(alarms.length).toBeGreaterThanOrEqual(4);
    // Errors less the inbox's designed gap retries (InboxGapRetry): wait-for-gap's retries do not page.
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Threshold: 0,
      Metrics: Match.arrayWith([
        Match.objectLike({ Expression: 'errors - FILL(gapRetries, 0)' }),
        Match.objectLike({
          Id: 'errors',
          MetricStat: Match.objectLike({
            Metric: Match.objectLike({ Namespace: 'AWS/Lambda', MetricName: 'Errors' }),
          }),
        }),
        Match.objectLike({
          Id: 'gapRetries',
          MetricStat: Match.objectLike({
            Metric: {
              Namespace: 'Outbox',
              MetricName: 'InboxGapRetry',
              Dimensions: [{ Name: 'consumer', Value: 'billing' }],
            },
          }),
        }),
      ]),
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'Outbox',
      MetricName: 'InboxParked',
      Dimensions: [{ Name: 'consumer', Value: 'billing' }],
    });
    for (const q of [consumer.deadLetterQueue, consumer.failedEventsQueue]) {
      const id = Stack.of(consumer).getLogicalId(q.node.defaultChild as never);
      t.hasResourceProperties('AWS::CloudWatch::Alarm', {
        Namespace: 'AWS/SQS',
        MetricName: 'ApproximateNumberOfMessagesVisible',
        Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [id, 'QueueName'] } }],
      });
    }
  });

  it("gives the failure queues' alarms the command that replays them, with both queue URLs and the function filled in", () => {
    expectReplayCommandInAlarms(t, consumer);
  });
});

describe('OutboxConsumer options and checks (bundling skipped)', () => {
  const app = () => newApp({ context: NO_BUNDLING });

  it('with 1 retry and a 10-minute event age, tells the inbox a 60 s window', () => {
    const { stack, base } = relayStack(app());
    const consumer = new OutboxConsumer(stack, 'C', {
      ...base,
      entry,
      retryAttempts: 1,
      maxEventAge: Duration.minutes(10),
    });
    expect(consumer.inboxSettings).toEqual({ retryWindowSeconds: 60, maxEventAgeSeconds: 600 });
    Template.fromStack(stack).hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      MaximumRetryAttempts: 1,
      MaximumEventAgeInSeconds: 600,
    });
  });

  it("wires a function of the user's own, adding the environment", () => {
    const { stack, base } = relayStack(app());
    const own = inlineFunction(stack, 'Own');
    const consumer = new OutboxConsumer(stack, 'C', { ...base, existingFunction: own, retryAttempts: 0 });
    expect(consumer.function).toBe(own);
    const t = Template.fromStack(stack);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ OUTBOX_INBOX_RETRY_WINDOW_SECONDS: '0' }) },
    });
    t.hasResourceProperties('AWS::Lambda::EventInvokeConfig', { MaximumRetryAttempts: 0 });
  });

  it.each([
    ['events', { events: [] }],
    ['events[0].source', { events: [{ type: 'OrderPlaced', source: undefined }] }],
    ['events[1].type', { events: [OrderPlaced, { type: '', source: 'demo.shop' }] }],
    ['consumer', { consumer: '' }],
    ['retryAttempts', { retryAttempts: 3 as 2 }],
    ['maxEventAge', { retryAttempts: 2 as const, maxEventAge: Duration.minutes(2) }],
    ['entry', { existingFunction: undefined, entry: undefined }],
  ])('refuses bad props with an OutboxConfigError naming %s', (field, override) => {
    const { stack, base } = relayStack(app());
    let error: unknown;
    try {
      new OutboxConsumer(stack, 'Bad', { entry, ...base, ...override } as OutboxConsumerProps);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).variable).toBe(field);
    expect((error as Error).message).toContain(field);
  });

  it('builds one rule from several events, each source and type once', () => {
    const { stack, base } = relayStack(app());
    new OutboxConsumer(stack, 'C', {
      ...base,
      entry,
      events: [OrderPlaced, { type: 'OrderCancelled', source: 'demo.shop' }],
      eventBus: events.EventBus.fromEventBusName(stack, 'Other', 'other'),
    });
    Template.fromStack(stack).hasResourceProperties('AWS::Events::Rule', {
      EventBusName: 'other',
      EventPattern: {
        source: ['demo.shop', 'outbox.heartbeat'],
        'detail-type': ['OrderPlaced', 'OrderCancelled', 'OutboxHeartbeat'],
      },
    });
  });
});

describe('OutboxConsumer, queue topology (bundling skipped)', () => {
  const build = (extra: Partial<OutboxConsumerProps> = {}) => {
    const { stack, base } = relayStack(newApp({ context: NO_BUNDLING }));
    const consumer = new OutboxConsumer(stack, 'Billing', { ...base, entry, topology: 'queue', ...extra });
    return {
      consumer,
      t: Template.fromStack(stack),
      id: (c: Construct) => Stack.of(stack).getLogicalId(c.node.defaultChild as never),
    };
  };

  it("gives the failure queues' alarms the replay command", () => {
    const { consumer, t } = build();
    expectReplayCommandInAlarms(t, consumer);
  });

  it('sends the rule to an encrypted queue with a redrive policy, read with partial batch responses', () => {
    const { consumer, t, id } = build();
    const queue = id(consumer.queue as Construct);
    const failed = id(consumer.failedEventsQueue);
    const dlq = id(consumer.deadLetterQueue);
    t.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: {
        source: ['demo.shop', 'outbox.heartbeat'],
        'detail-type': ['OrderPlaced', 'OutboxHeartbeat'],
      },
      Targets: [
        Match.objectLike({
          Arn: { 'Fn::GetAtt': [queue, 'Arn'] },
          RetryPolicy: { MaximumRetryAttempts: 185, MaximumEventAgeInSeconds: 86_400 },
          DeadLetterConfig: { Arn: { 'Fn::GetAtt': [dlq, 'Arn'] } },
        }),
      ],
    });
    expect(t.toJSON().Resources[queue].Properties).toMatchObject({
      SqsManagedSseEnabled: true,
      VisibilityTimeout: 180,
      MessageRetentionPeriod: 7 * 86_400,
      RedrivePolicy: { deadLetterTargetArn: { 'Fn::GetAtt': [failed, 'Arn'] }, maxReceiveCount: 5 },
    });
    t.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [queue, 'Arn'] },
      BatchSize: 10,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
    });
    // No asynchronous invocation: nothing to configure for it.
    t.resourceCountIs('AWS::Lambda::EventInvokeConfig', 2); // the relay's and the monitor's only
    const alarms = Object.keys(t.findResources('AWS::CloudWatch::Alarm')).filter((a) =>
      a.startsWith('Billing'),
    );
    expect(alarms).toHaveLength(7);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ApproximateAgeOfOldestMessage',
      Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [queue, 'QueueName'] } }],
      Threshold: 3_600,
    });
  });

  it('tells the inbox the window of its receives: (maxReceiveCount - 1) x visibility timeout', () => {
    const { consumer, t } = build({ maxReceiveCount: 3, visibilityTimeout: Duration.seconds(120) });
    expect(consumer.inboxSettings).toEqual({ retryWindowSeconds: 240, maxEventAgeSeconds: 21_600 });
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ OUTBOX_INBOX_RETRY_WINDOW_SECONDS: '240' }) },
    });
  });

  it.each([
    ['visibilityTimeout', { visibilityTimeout: Duration.seconds(20) }], // under the function's 30 s
    ['visibilityTimeout', { visibilityTimeout: Duration.minutes(5) }], // the monitor would count it failed first
    ['maxReceiveCount', { maxReceiveCount: 0 }],
    ['batchSize', { batchSize: 11 }],
    ['retryAttempts', { retryAttempts: 1 as const }], // the direct topology's
  ])('refuses %s out of range or out of place', (field, extra) => {
    expect(() => build(extra as Partial<OutboxConsumerProps>)).toThrow(
      expect.objectContaining({ name: 'OutboxConfigError', variable: field }),
    );
  });

  it('refuses the direct-only and queue-only props in the other topology', () => {
    const { stack, base } = relayStack(newApp({ context: NO_BUNDLING }));
    expect(() => new OutboxConsumer(stack, 'D', { ...base, entry, maxReceiveCount: 3 })).toThrow(
      expect.objectContaining({ variable: 'maxReceiveCount' }),
    );
  });
});

describe("OutboxConsumer's dashboard widgets (bundling skipped)", () => {
  /** A dashboard's widgets, its body's tokens written as `LogicalId` or `LogicalId.Attribute`. */
  interface Widget {
    type: string;
    width: number;
    properties: { title?: string; metrics?: (string | Record<string, unknown>)[][] };
  }
  const dashboardWidgets = (t: Template, idPrefix: string): Widget[] => {
    const [dashboard] = Object.entries(t.findResources('AWS::CloudWatch::Dashboard')).filter(([id]) =>
      id.startsWith(idPrefix),
    );
    if (!dashboard) throw new Error(`no dashboard ${idPrefix}…`);
    const body = (dashboard[1] as { Properties: { DashboardBody: unknown } }).Properties.DashboardBody;
    const parts = (body as { 'Fn::Join': [string, unknown[]] })['Fn::Join']?.[1] ?? [body];
    const text = parts
      .map((part) => {
        if (typeof part === 'string') return part;
        const token = part as { Ref?: string; 'Fn::GetAtt'?: [string, string] };
        return token.Ref ?? token['Fn::GetAtt']?.join('.') ?? JSON.stringify(part);
      })
      .join('');
    return (JSON.parse(text) as { widgets: Widget[] }).widgets;
  };
  /** Each graph's metrics as `Namespace MetricName DimensionValue… statistic`. */
  const metricsOf = (widgets: Widget[], consumer: string) =>
    widgets
      .filter((w) => w.properties.title?.startsWith(`${consumer}: `))
      .flatMap((w) =>
        (w.properties.metrics ?? []).map((m) => {
          const options = (typeof m.at(-1) === 'object' ? m.at(-1) : {}) as { stat?: string };
          return [...m.filter((x) => typeof x === 'string'), options.stat].join(' ');
        }),
      );
  const build = (
    topology: 'direct' | 'queue',
    withDashboard: boolean,
    before: (consumer: OutboxConsumer) => void = () => {},
  ) => {
    const { stack, relay, base } = relayStack(newApp({ context: NO_BUNDLING }));
    const consumer = new OutboxConsumer(stack, 'Billing', {
      ...base,
      entry,
      topology,
      ...(withDashboard ? { dashboard: relay.dashboard } : {}),
    });
    before(consumer);
    const t = Template.fromStack(stack);
    const id = (c: Construct) => Stack.of(stack).getLogicalId(c.node.defaultChild as never);
    return { consumer, t, id, fn: id(consumer.function) };
  };

  it("adds the failure queues, the function's invocations, errors and duration, and parked events to the relay's dashboard", () => {
    const { consumer, t, id, fn } = build('direct', true);
    expect(consumer.widgets).toHaveLength(4);
    const widgets = dashboardWidgets(t, 'Outbox');
    const ours = widgets.filter((w) => w.properties.title?.startsWith('billing: '));
    expect(ours.map((w) => w.width)).toEqual([6, 6, 6, 6]);
    expect(metricsOf(widgets, 'billing').sort()).toEqual(
      [
        `AWS/SQS ApproximateNumberOfMessagesVisible QueueName ${id(consumer.deadLetterQueue)}.QueueName Maximum`,
        `AWS/SQS ApproximateNumberOfMessagesVisible QueueName ${id(consumer.failedEventsQueue)}.QueueName Maximum`,
        `AWS/Lambda Invocations FunctionName ${fn} Sum`,
        `AWS/Lambda Errors FunctionName ${fn} Sum`,
        `AWS/Lambda Duration FunctionName ${fn} p50`,
        `AWS/Lambda Duration FunctionName ${fn} p99`,
        'Outbox InboxParked consumer billing Sum',
        'Outbox ConsumerLag consumer billing p50',
        'Outbox ConsumerLag consumer billing p99',
        'Outbox HeartbeatReceived consumer billing Sum',
      ].sort(),
    );
    // The parked graph is the alarm's metric.
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'Outbox',
      MetricName: 'InboxParked',
      Dimensions: [{ Name: 'consumer', Value: 'billing' }],
      Statistic: 'Sum',
      Period: 300,
    });
    // The relay's own widgets are still there.
    expect(widgets.some((w) => w.properties.title === 'Throughput (events published)')).toBe(true);
  });

  it("adds the queue's visible messages and oldest message age in the queue topology", () => {
    const { consumer, t, id } = build('queue', true);
    expect(consumer.widgets).toHaveLength(5);
    const queue = id(consumer.queue as Construct);
    expect(metricsOf(dashboardWidgets(t, 'Outbox'), 'billing')).toEqual(
      expect.arrayContaining([
        `AWS/SQS ApproximateNumberOfMessagesVisible QueueName ${queue}.QueueName Maximum`,
        `AWS/SQS ApproximateAgeOfOldestMessage QueueName ${queue}.QueueName Maximum`,
      ]),
    );
  });

  it('leaves the dashboard alone without the prop, and its widgets fit a dashboard of your own', () => {
    const { t } = build('direct', false, (consumer) => {
      new cloudwatch.Dashboard(Stack.of(consumer), 'Mine', { widgets: [[...consumer.widgets]] });
    });
    expect(metricsOf(dashboardWidgets(t, 'Outbox'), 'billing')).toEqual([]);
    expect(metricsOf(dashboardWidgets(t, 'Mine'), 'billing')).toHaveLength(10);
  });
});

describe("the inbox takes the construct's settings from the function's environment", () => {
  afterEach(() => vi.unstubAllEnvs());
  // Options are checked when inbox() is called, before any connection: a pool-shaped stub will do.
  const sql = { begin: async () => undefined } as unknown as Sql;
  const build = (options: {
    gapWaitSeconds?: number;
    retryWindowSeconds?: number;
    maxEventAgeSeconds?: number;
  }) => {
    try {
      inbox({ sql, consumer: 'billing', order: 'wait-for-gap', metrics: false, ...options }, async () => {});
      return 'accepted';
    } catch (error) {
      expect(error).toBeInstanceOf(InboxOptionsError);
      return (error as InboxOptionsError).field;
    }
  };

  it('a 60 s window from OUTBOX_INBOX_RETRY_WINDOW_SECONDS refuses the default 120 s gap wait', () => {
    expect(build({})).toBe('accepted');
    vi.stubEnv('OUTBOX_INBOX_RETRY_WINDOW_SECONDS', '60');
    expect(build({})).toBe('gapWaitSeconds');
    expect(build({ gapWaitSeconds: 50 })).toBe('accepted');
    // An option given in the code wins over the variable.
    expect(build({ retryWindowSeconds: 180 })).toBe('accepted');
  });

  it('checks OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS against the window, and refuses a value that is no number', () => {
    vi.stubEnv('OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS', '120');
    expect(build({})).toBe('maxEventAgeSeconds');
    vi.stubEnv('OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS', 'six hours');
    expect(() => inbox({ sql, consumer: 'billing' }, async () => {})).toThrow(
      /maxEventAgeSeconds: OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS must be a number/,
    );
  });
});

describe('a consumer whose inbox the monitor cannot see', () => {
  /** The warnings of a consumer on the relay's bus whose inbox is in `databaseName`. */
  const warnings = (databaseName: string) => {
    const app = newApp();
    const { stack, base } = relayStack(app);
    const fn = inlineFunction(stack, 'Fn');
    new OutboxConsumer(stack, 'Billing', { ...base, existingFunction: fn, databaseName });
    return Annotations.fromStack(stack)
      .findWarning('*', Match.stringLikeRegexp('which is the only one the relay'))
      .map((w) => String(w.entry.data));
  };

  it("warns at synth when its inbox is in a database other than the outbox's, and says what to schedule", () => {
    const [warning, ...more] = warnings('billing');
    expect(more).toEqual([]);
    expect(warning).toMatch(
      /OutboxConsumer billing: its inbox is in database billing, not in the outbox's \(shop\)/,
    );
    expect(warning).toMatch(/maintainInbox/);
    expect(warning).toMatch(/docs\/consumer-operations\.md#a-consumer-in-its-own-database/);
  });

  it("says nothing when its inbox is in the outbox's database, which the monitor prunes and counts", () => {
    expect(warnings('shop')).toEqual([]);
  });
});
