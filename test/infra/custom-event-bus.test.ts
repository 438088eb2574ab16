/**
 * The Custom Event Bus (EventsV2) in the constructs (issue 35): OutboxRelay creates
 * `AWS::EventsV2::EventBus` (or takes one by ARN), gives the relay `OUTBOX_EVENT_BUS_ARN` and
 * `events:PutEvents` on that ARN only, writes the bus's resource policy, and alarms on its
 * subscribers; OutboxConsumer subscribes with a FIFO `AWS::EventsV2::Subscriber` that invokes its
 * function synchronously. Synthesised, not deployed: what is checked is the template.
 */
import { readFileSync } from 'node:fs';
import { Duration, type Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import { describe, expect, it } from 'vitest';
import { OrderPlaced } from '../../examples/billing/events.ts';
import {
  CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH,
  type OutboxConsumerProps,
} from '../../infra/consumer-props.ts';
import { OutboxConsumer } from '../../infra/outbox-consumer.ts';
import type { OutboxRelay } from '../../infra/outbox-relay.ts';
import type { OutboxRelayProps } from '../../infra/props.ts';
import { OutboxConfigError } from '../../shared/platform/errors.ts';
import { EnvVar } from '../../shared/platform/names.ts';
import { inlineFunction, NO_BUNDLING, ORDERS, relayStack, useApps } from '../support/synth.ts';

// No bundling: the functions' code is not what these tests look at.
const newApp = useApps('outbox-custom-bus-test-', { context: NO_BUNDLING });

/** The key-policy actions eb-custom-bus-encryption lists for events.amazonaws.com. */
const CUSTOM_BUS_SERVICE_KEY_ACTIONS = [
  'kms:Decrypt',
  'kms:Encrypt',
  'kms:GenerateDataKeyWithoutPlaintext',
  'kms:ReEncryptFrom',
  'kms:ReEncryptTo',
];

const EXISTING = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abcdefghijklmnopqrstuvwxy';

/** A stack with imported network and proxy (ORDERS) and an OutboxRelay on a Custom Event Bus. */
function relay(props: Partial<OutboxRelayProps> | ((stack: Stack) => Partial<OutboxRelayProps>) = {}) {
  const { relay: outbox, ...rest } = relayStack(newApp(), ORDERS, (stack) => ({
    customEventBus: {},
    ...(typeof props === 'function' ? props(stack) : props),
  }));
  return { outbox, ...rest };
}

/** The logical id of a construct's resource (its default child) or of a resource. */
function idOf(stack: Stack, c: object): string {
  const child = (c as { node?: { defaultChild?: unknown } }).node?.defaultChild;
  return stack.getLogicalId((child ?? c) as never);
}

/** The relay function's resource. */
function relayFunction(t: Template, stack: Stack, outbox: OutboxRelay) {
  return t.toJSON().Resources[idOf(stack, outbox.relayFunction)].Properties;
}

/** Every statement of the relay role's policies. */
function relayStatements(t: Template, stack: Stack, outbox: OutboxRelay) {
  const roleId = idOf(stack, outbox.relayFunction.role as iam.Role);
  return Object.values(t.findResources('AWS::IAM::Policy'))
    .filter((p) => JSON.stringify(p.Properties.Roles).includes(roleId))
    .flatMap((p) => p.Properties.PolicyDocument.Statement as { Action: unknown; Resource: unknown }[]);
}

describe('OutboxRelay on a Custom Event Bus it creates', () => {
  const { outbox, stack } = relay();
  const t = Template.fromStack(stack);
  const busId = idOf(stack, outbox.customEventBus as never);

  it('creates AWS::EventsV2::EventBus with 7 days of retention and the AWS owned key, and no classic bus', () => {
    t.resourceCountIs('AWS::EventsV2::EventBus', 1);
    t.resourceCountIs('AWS::Events::EventBus', 0);
    t.resourceCountIs('AWS::Events::EventBusPolicy', 0);
    const bus = t.toJSON().Resources[busId].Properties;
    expect(bus.StorageConfiguration).toEqual({ RetentionPeriodInDays: 7 });
    expect(bus.EncryptionConfiguration).toBeUndefined();
    expect(bus.Name).toMatch(/^[A-Za-z0-9][.\-_A-Za-z0-9]*$/);
    expect(outbox.busKind).toBe('custom');
    expect(stack.resolve(outbox.customEventBusArn)).toEqual({ 'Fn::GetAtt': [busId, 'EventBusArn'] });
  });

  it('gives the relay OUTBOX_EVENT_BUS_ARN and no EVENT_BUS_NAME', () => {
    const vars = relayFunction(t, stack, outbox).Environment.Variables;
    expect(vars.OUTBOX_EVENT_BUS_ARN).toEqual({ 'Fn::GetAtt': [busId, 'EventBusArn'] });
    expect(vars).not.toHaveProperty('EVENT_BUS_NAME');
  });

  it('allows the relay events:PutEvents on the bus ARN only', () => {
    const puts = relayStatements(t, stack, outbox).filter((s) =>
      JSON.stringify(s.Action).includes('events:'),
    );
    expect(puts).toEqual([
      expect.objectContaining({
        Action: 'events:PutEvents',
        Effect: 'Allow',
        Resource: { 'Fn::GetAtt': [busId, 'EventBusArn'] },
      }),
    ]);
  });

  it("writes the bus's resource policy: PutEvents denied to every principal but the relay's role", () => {
    t.resourceCountIs('AWS::EventsV2::ResourcePolicy', 1);
    const policy = t.toJSON().Resources[idOf(stack, outbox.customEventBusPolicy as never)].Properties;
    expect(policy.EventBusArn).toEqual({ 'Fn::GetAtt': [busId, 'EventBusArn'] });
    expect(policy.PolicyDocument.Version).toBe('2012-10-17');
    const [statement] = policy.PolicyDocument.Statement;
    expect(statement).toMatchObject({
      Effect: 'Deny',
      Principal: '*',
      Action: 'events:PutEvents',
      Resource: { 'Fn::GetAtt': [busId, 'EventBusArn'] },
      Condition: {
        ArnNotEquals: {
          'aws:PrincipalArn': { 'Fn::GetAtt': [idOf(stack, outbox.relayFunction.role as iam.Role), 'Arn'] },
        },
      },
    });
    // Without sources, every source is denied: the bus is the outbox's alone.
    expect(statement.Condition.StringEquals).toBeUndefined();
  });

  it('denies events:PutRawEvents too, unconditioned on source, to every principal but the relay role', () => {
    const policy = t.toJSON().Resources[idOf(stack, outbox.customEventBusPolicy as never)].Properties;
    const raw = (policy.PolicyDocument.Statement as { Action: string }[]).filter(
      (s) => s.Action === 'events:PutRawEvents',
    );
    expect(raw).toEqual([
      {
        Sid: expect.any(String),
        Effect: 'Deny',
        Principal: '*',
        Action: 'events:PutRawEvents',
        Resource: { 'Fn::GetAtt': [busId, 'EventBusArn'] },
        Condition: {
          ArnNotEquals: {
            'aws:PrincipalArn': { 'Fn::GetAtt': [idOf(stack, outbox.relayFunction.role as iam.Role), 'Arn'] },
          },
        },
      },
    ]);
  });

  it("alarms on its subscribers' dead-lettered and dropped events, across the bus, to the alarm topic", () => {
    for (const [alarm, metric] of [
      [outbox.customBusAlarms?.deadLettered, 'OnFailureDestinationDelivered'],
      [outbox.customBusAlarms?.dropped, 'EventsDropped'],
    ] as const) {
      const props = t.toJSON().Resources[idOf(stack, alarm as never)].Properties;
      const query = JSON.stringify(props.Metrics[0].Expression);
      expect(query).toContain(
        `SELECT SUM(${metric}) FROM SCHEMA(\\"AWS/EventsV2\\", EventBus, Subscriber) WHERE EventBus = '`,
      );
      expect(query).toContain(`"Fn::GetAtt":["${busId}","EventBusArn"]`);
      expect(props.Threshold).toBe(0);
      expect(props.AlarmActions).toEqual([{ Ref: idOf(stack, outbox.alarmTopic as never) }]);
    }
  });

  it('has no classic bus to give: relay.eventBus says to use customEventBusArn', () => {
    expect(() => outbox.eventBus).toThrow(OutboxConfigError);
    expect(() => outbox.eventBus).toThrow(/customEventBusArn/);
  });
});

describe('OutboxRelay on a Custom Event Bus: settings and refusals', () => {
  it('sets the retention, the name and a KMS key, whose policy lets events.amazonaws.com use it', () => {
    let key: kms.Key | undefined;
    const { stack, outbox } = relay((s) => {
      key = new kms.Key(s, 'BusKey');
      return { customEventBus: { retentionDays: 30, name: 'orders-bus', kmsKey: key } };
    });
    const t = Template.fromStack(stack);
    const keyId = idOf(stack, key as kms.Key);
    expect(t.toJSON().Resources[idOf(stack, outbox.customEventBus as never)].Properties).toMatchObject({
      Name: 'orders-bus',
      StorageConfiguration: { RetentionPeriodInDays: 30 },
      EncryptionConfiguration: { KmsKeyIdentifier: { 'Fn::GetAtt': [keyId, 'Arn'] } },
    });
    const keyPolicy = t.toJSON().Resources[keyId].Properties.KeyPolicy.Statement as {
      Principal?: { Service?: string };
      Action: string | string[];
    }[];
    // eb-custom-bus-encryption: without these five the bus goes CREATE_FAILED.
    const service = keyPolicy.find((s) => s.Principal?.Service === 'events.amazonaws.com');
    expect(service?.Action).toEqual(expect.arrayContaining(CUSTOM_BUS_SERVICE_KEY_ACTIONS));
    // PutEvents on a bus with a customer managed key checks kms:Decrypt with the caller's credentials.
    expect(relayStatements(t, stack, outbox)).toContainEqual(
      expect.objectContaining({
        Effect: 'Allow',
        Action: 'kms:Decrypt',
        Resource: { 'Fn::GetAtt': [keyId, 'Arn'] },
      }),
    );
  });

  it('grants the relay kms:Decrypt on an imported key, whose policy is left to its owner', () => {
    const arn = 'arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab';
    const { stack, outbox } = relay((s) => ({
      customEventBus: { kmsKey: kms.Key.fromKeyArn(s, 'Imported', arn) },
    }));
    const t = Template.fromStack(stack);
    expect(relayStatements(t, stack, outbox)).toContainEqual(
      expect.objectContaining({ Effect: 'Allow', Action: 'kms:Decrypt', Resource: arn }),
    );
  });

  it('takes an existing bus by ARN: no bus created, PutEvents on that ARN, its policy left alone with a warning', () => {
    const { stack, outbox } = relay({ customEventBus: { existingArn: EXISTING } });
    const t = Template.fromStack(stack);
    t.resourceCountIs('AWS::EventsV2::EventBus', 0);
    t.resourceCountIs('AWS::EventsV2::ResourcePolicy', 0);
    expect(relayFunction(t, stack, outbox).Environment.Variables.OUTBOX_EVENT_BUS_ARN).toBe(EXISTING);
    expect(relayStatements(t, stack, outbox)).toContainEqual(
      expect.objectContaining({ Action: 'events:PutEvents', Resource: EXISTING }),
    );
    expect(
      Annotations.fromStack(stack).findWarning('*', Match.stringLikeRegexp('Custom Event Bus was passed in')),
    ).toHaveLength(1);
  });

  it('names the sources in the policy of a bus it creates, and exempts the publishers', () => {
    let operator: iam.Role | undefined;
    const { stack, outbox } = relay((s) => {
      operator = new iam.Role(s, 'Operator', { assumedBy: new iam.AccountRootPrincipal() });
      return { sources: ['shop.orders'], publishers: [operator] };
    });
    const t = Template.fromStack(stack);
    const [statement] =
      t.toJSON().Resources[idOf(stack, outbox.customEventBusPolicy as never)].Properties.PolicyDocument
        .Statement;
    // The heartbeat's source with them: no one but the relay can put a heartbeat either.
    expect(statement.Condition.StringEquals).toEqual({
      'events:source': ['shop.orders', 'outbox.heartbeat'],
    });
    expect(statement.Condition.ArnNotEquals['aws:PrincipalArn']).toHaveLength(2);
    // A raw event's source is whatever its bytes say: PutRawEvents is denied whatever the source.
    const raw = t
      .toJSON()
      .Resources[idOf(stack, outbox.customEventBusPolicy as never)].Properties.PolicyDocument.Statement.find(
        (s: { Action: string }) => s.Action === 'events:PutRawEvents',
      );
    expect(raw.Condition.StringEquals).toBeUndefined();
    expect(raw.Condition.ArnNotEquals['aws:PrincipalArn']).toHaveLength(2);
  });

  it.each([
    ['eventBus', (s: Stack) => ({ eventBus: new events.EventBus(s, 'Classic') })],
    [
      'customEventBus.existingArn',
      () => ({ customEventBus: { existingArn: 'arn:aws:events:eu-west-1:123456789012:event-bus/orders' } }),
    ],
    ['customEventBus.retentionDays', () => ({ customEventBus: { retentionDays: 0 } })],
    ['customEventBus.retentionDays', () => ({ customEventBus: { retentionDays: 366 } })],
    ['customEventBus.retentionDays', () => ({ customEventBus: { existingArn: EXISTING, retentionDays: 7 } })],
    ['customEventBus.name', () => ({ customEventBus: { name: '-bad' } })],
    ['restrictPutEvents', () => ({ customEventBus: { existingArn: EXISTING }, sources: ['shop.orders'] })],
  ] as const)('refuses %s with an OutboxConfigError naming it', (variable, props) => {
    let error: unknown;
    try {
      relay(props as (s: Stack) => Partial<OutboxRelayProps>);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).variable).toBe(variable);
  });

  it('with restrictPutEvents: false, an existing bus and sources synthesise, with no policy written', () => {
    const { stack } = relay({
      customEventBus: { existingArn: EXISTING },
      sources: ['shop.orders'],
      restrictPutEvents: false,
    });
    Template.fromStack(stack).resourceCountIs('AWS::EventsV2::ResourcePolicy', 0);
  });
});

/** A consumer of the relay's Custom Event Bus, with a function of its own (no bundling). */
function consumer(props: Partial<OutboxConsumerProps> = {}, fnTimeout = Duration.seconds(20)) {
  const { stack, outbox, base } = relay();
  const fn = inlineFunction(stack, 'Billing', { timeout: fnTimeout });
  const c = new OutboxConsumer(stack, 'BillingConsumer', { ...base, existingFunction: fn, ...props });
  return { stack, outbox, fn, consumer: c, base };
}

describe('OutboxConsumer on a Custom Event Bus', () => {
  const { stack, outbox, fn, consumer: c } = consumer();
  const t = Template.fromStack(stack);
  const sub = () => t.toJSON().Resources[idOf(stack, c.subscriber as never)].Properties;
  const busArn = { 'Fn::GetAtt': [idOf(stack, outbox.customEventBus as never), 'EventBusArn'] };
  const fnArn = { 'Fn::GetAtt': [idOf(stack, fn), 'Arn'] };
  const dlqArn = { 'Fn::GetAtt': [idOf(stack, c.deadLetterQueue as never), 'Arn'] };

  it('subscribes FIFO, filtering the events on their source and detail-type in the envelope (DATA)', () => {
    t.resourceCountIs('AWS::EventsV2::Subscriber', 1);
    t.resourceCountIs('AWS::Events::Rule', 0);
    expect(sub().Type).toBe('FIFO');
    expect(sub().EventBusArn).toEqual(busArn);
    const [filter] = sub().FilterConfiguration.Filters;
    expect(filter.Scope).toBe('DATA');
    // With the relay monitor's heartbeat (docs/observe.md#the-heartbeat).
    expect(JSON.parse(filter.Pattern)).toEqual({
      source: [OrderPlaced.source, 'outbox.heartbeat'],
      'detail-type': [OrderPlaced.type, 'OutboxHeartbeat'],
    });
  });

  it('invokes the function synchronously, one event at a time, retries and then dead-letters', () => {
    expect(sub().InvokeConfiguration).toMatchObject({
      TargetArn: fnArn,
      RoleArn: { 'Fn::GetAtt': [idOf(stack, c.subscriberRole as never), 'Arn'] },
      LambdaParameters: { InvocationType: 'REQUEST_RESPONSE', InvocationTimeoutSeconds: '30' },
    });
    expect(sub().BatchConfiguration).toEqual({ MaxBatchSize: 1 });
    expect(sub().RetryPolicy).toEqual({ MaxRetryAttempts: 185, MaxEventAgeInSeconds: 3600 });
    expect(sub().OnFailureConfiguration).toEqual({ Arn: dlqArn });
    // No asynchronous invocation config: the subscriber does not invoke asynchronously.
    const invokeConfigs = Object.values(t.findResources('AWS::Lambda::EventInvokeConfig'));
    expect(invokeConfigs.map((r) => JSON.stringify(r.Properties.FunctionName))).not.toContain(
      JSON.stringify({ Ref: idOf(stack, fn) }),
    );
    expect(invokeConfigs).toHaveLength(2); // the relay's and the monitor's
    expect(c.failedEventsQueue).toBe(c.deadLetterQueue);
  });

  it("gives the subscriber's role, trusted by events.amazonaws.com, invoke on the function and send on the dead-letter queue only", () => {
    const roleId = idOf(stack, c.subscriberRole as never);
    const role = t.toJSON().Resources[roleId].Properties;
    expect(role.AssumeRolePolicyDocument.Statement).toEqual([
      expect.objectContaining({ Principal: { Service: 'events.amazonaws.com' }, Action: 'sts:AssumeRole' }),
    ]);
    const statements = Object.values(t.findResources('AWS::IAM::Policy'))
      .filter((p) => JSON.stringify(p.Properties.Roles).includes(roleId))
      .flatMap((p) => p.Properties.PolicyDocument.Statement);
    expect(statements).toEqual([
      expect.objectContaining({ Action: 'lambda:InvokeFunction', Resource: fnArn }),
      expect.objectContaining({ Action: 'sqs:SendMessage', Resource: dlqArn }),
    ]);
    // The policy exists before the subscriber delivers.
    const policyId = Object.entries(t.findResources('AWS::IAM::Policy')).find(([, p]) =>
      JSON.stringify(p.Properties.Roles).includes(roleId),
    )?.[0];
    expect(t.toJSON().Resources[idOf(stack, c.subscriber as never)].DependsOn).toContain(policyId);
  });

  it("derives the inbox's retry window and event age from the subscriber's retry policy", () => {
    expect(c.inboxSettings).toEqual({ retryWindowSeconds: 3600, maxEventAgeSeconds: 3600 });
    const vars = t.toJSON().Resources[idOf(stack, fn)].Properties.Environment.Variables;
    expect(vars.OUTBOX_INBOX_RETRY_WINDOW_SECONDS).toBe('3600');
    expect(vars.OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS).toBe('3600');
  });

  it("alarms on the dead-letter queue and on the subscriber's dropped events", () => {
    const failed = t.toJSON().Resources[idOf(stack, c.alarms.failed as never)].Properties;
    expect(failed).toMatchObject({
      Namespace: 'AWS/EventsV2',
      MetricName: 'EventsDropped',
      Statistic: 'Sum',
    });
    expect(failed.Dimensions).toEqual(
      expect.arrayContaining([
        { Name: 'EventBus', Value: busArn },
        {
          Name: 'Subscriber',
          Value: { 'Fn::GetAtt': [idOf(stack, c.subscriber as never), 'SubscriberArn'] },
        },
      ]),
    );
    const undelivered = t.toJSON().Resources[idOf(stack, c.alarms.undelivered as never)].Properties;
    expect(undelivered.MetricName).toBe('ApproximateNumberOfMessagesVisible');
    expect(() => c.rule).toThrow(OutboxConfigError);
  });

  it('takes the settings: retries and event age', () => {
    const { stack: s2, consumer: c2 } = consumer({
      deliveryRetryAttempts: 10,
      deliveryMaxEventAge: Duration.minutes(20),
    });
    const p = Template.fromStack(s2).toJSON().Resources[idOf(s2, c2.subscriber as never)].Properties;
    expect(p.RetryPolicy).toEqual({ MaxRetryAttempts: 10, MaxEventAgeInSeconds: 1200 });
    expect(c2.inboxSettings.retryWindowSeconds).toBe(1200);
  });

  it('queue topology: the subscriber sends to an SQS FIFO queue (a group per aggregate, deduplicated by event id) that the function reads', () => {
    const { stack: s2, consumer: q, fn: qfn } = consumer({ topology: 'queue' }, Duration.seconds(60));
    const t2 = Template.fromStack(s2);
    const json = t2.toJSON();
    const p = json.Resources[idOf(s2, q.subscriber as never)].Properties;
    const queueId = idOf(s2, q.queue as never);
    expect(p.Type).toBe('FIFO');
    expect(p.InvokeConfiguration).toEqual({
      TargetArn: { 'Fn::GetAtt': [queueId, 'Arn'] },
      RoleArn: expect.anything(),
      SqsParameters: {
        MessageGroupId: '{% $events.SystemMetadata.EventGroupId %}',
        MessageDeduplicationId: '{% $events.SystemMetadata.DeduplicationId %}',
      },
    });
    expect(p.BatchConfiguration).toBeUndefined();
    // The registry schema takes these parameters (test/infra/cfn-schemas).
    const schema = JSON.parse(
      readFileSync(new URL('./cfn-schemas/aws-eventsv2-subscriber.json', import.meta.url), 'utf8'),
    );
    const sqsSchema = schema.definitions.SqsParameters.properties;
    for (const key of Object.keys(p.InvokeConfiguration.SqsParameters)) {
      expect(sqsSchema[key]?.type, key).toBe('string');
    }
    // The queue is FIFO, redriving to a FIFO failed-events queue; the function reads it with
    // partial batch responses; the subscriber's role may send to it and invokes nothing.
    const queue = json.Resources[queueId].Properties;
    expect(queue.FifoQueue).toBe(true);
    // At least the function's timeout (60 s), as on the classic bus's queue topology.
    expect(queue.VisibilityTimeout).toBeGreaterThanOrEqual(60);
    const failedId = idOf(s2, q.failedEventsQueue as never);
    expect(json.Resources[failedId].Properties.FifoQueue).toBe(true);
    expect(queue.RedrivePolicy.deadLetterTargetArn).toEqual({ 'Fn::GetAtt': [failedId, 'Arn'] });
    t2.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [queueId, 'Arn'] },
      FunctionResponseTypes: ['ReportBatchItemFailures'],
    });
    const statements = Object.values(json.Resources as Record<string, { Type: string; Properties: never }>)
      .filter((r) => r.Type === 'AWS::IAM::Policy')
      .flatMap(
        (r) =>
          (r.Properties as { PolicyDocument: { Statement: { Action: unknown; Resource: unknown }[] } })
            .PolicyDocument.Statement,
      )
      .filter((st) => JSON.stringify(st.Resource).includes(queueId) && st.Action === 'sqs:SendMessage');
    expect(statements).toHaveLength(1);
    const invokes = JSON.stringify(
      json.Resources[idOf(s2, (q.subscriberRole as iam.Role).node.tryFindChild('DefaultPolicy') as never)]
        .Properties,
    );
    expect(invokes).not.toContain('lambda:InvokeFunction');
    expect(qfn.timeout?.toSeconds()).toBe(60);
    // No parkAfterAttempts: a failing message holds up only its group in the queue, not the subscriber.
    expect((q.environment as Record<string, string>)[EnvVar.inboxParkAfterAttempts]).toBeUndefined();
    expect(q.inboxSettings.retryWindowSeconds).toBe(4 * queue.VisibilityTimeout);
  });

  it('a direct (FIFO) consumer and a queue-topology consumer of one outbox deploy side by side on its bus', () => {
    const { stack: s3, consumer: direct, base } = consumer();
    const queued = new OutboxConsumer(s3, 'ShippingConsumer', {
      ...base,
      consumer: 'shipping',
      topology: 'queue',
      existingFunction: inlineFunction(s3, 'Shipping', { timeout: Duration.seconds(60) }),
    });
    const json = Template.fromStack(s3).toJSON();
    const subs = Object.values(
      json.Resources as Record<
        string,
        { Type: string; Properties: { InvokeConfiguration: { TargetArn: unknown } } }
      >,
    ).filter((r) => r.Type === 'AWS::EventsV2::Subscriber');
    expect(subs).toHaveLength(2);
    expect(subs.map((r) => JSON.stringify(r.Properties.InvokeConfiguration.TargetArn)).sort()).toEqual(
      [
        JSON.stringify({ 'Fn::GetAtt': [idOf(s3, queued.queue as never), 'Arn'] }),
        JSON.stringify({ 'Fn::GetAtt': [idOf(s3, direct.function as never), 'Arn'] }),
      ].sort(),
    );
  });

  it("sets the inbox's parkAfterAttempts (3 by default; a number; false for off) in the function's environment", () => {
    const env = (props: Partial<OutboxConsumerProps>) =>
      (consumer(props).consumer.environment as Record<string, string>)[EnvVar.inboxParkAfterAttempts];
    expect(env({})).toBe('3');
    expect(env({ parkAfterAttempts: 5 })).toBe('5');
    expect(env({ parkAfterAttempts: false })).toBeUndefined();
    let error: unknown;
    try {
      consumer({ parkAfterAttempts: 0 });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).variable).toBe('parkAfterAttempts');
  });

  it.each([
    ['retryAttempts', { retryAttempts: 1 }],
    ['maxEventAge', { maxEventAge: Duration.hours(1) }],
    ['deliveryMaxEventAge', { deliveryMaxEventAge: Duration.hours(7) }],
    ['eventBus', { customEventBusArn: undefined }],
  ] as const)('refuses %s with an OutboxConfigError naming it', (variable, props) => {
    let error: unknown;
    try {
      consumer(props as Partial<OutboxConsumerProps>);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).variable).toBe(variable);
  });

  it('refuses events whose subscriber filter pattern is over the 4,096 characters a filter takes, and takes one at the limit', () => {
    // 40 types of 110 characters make a pattern of about 4,600 (AWS::EventsV2::Subscriber
    // Filter.Pattern: cfn-lint with test/infra/cfn-schemas reports E3033; the deployment fails).
    const types = (n: number, length: number) =>
      Array.from({ length: n }, (_, i) => ({ ...OrderPlaced, type: `${i}`.padStart(length, 'T') }));
    expect(() => consumer({ events: types(40, 110) })).toThrow(
      expect.objectContaining({ variable: 'events' }),
    );
    const { stack, consumer: c } = consumer({ events: types(35, 110) });
    const pattern = Template.fromStack(stack).toJSON().Resources[idOf(stack, c.subscriber as never)]
      .Properties.FilterConfiguration.Filters[0].Pattern as string;
    expect(pattern.length).toBeGreaterThan(3_900);
    expect(pattern.length).toBeLessThanOrEqual(CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH);
  });

  it('refuses a function whose timeout is over the 30 s a subscriber waits', () => {
    expect(() => consumer({}, Duration.seconds(31))).toThrow(
      expect.objectContaining({ variable: 'existingFunction' }),
    );
  });
});

/**
 * Replays across time (issue 45): the inbox answers an event older than its retention `stale`
 * (beyond-retention), so a bus that keeps events longer than the consumer's inbox keeps records
 * promises replays that would apply nothing: refused at synthesis, naming the setting.
 */
describe('the Custom Event Bus retention against the consumer inbox retention', () => {
  function consumerOf(
    busDays: number | undefined,
    props: Partial<OutboxConsumerProps> = {},
    monitorDays: number | undefined = undefined,
  ) {
    const { stack, base } = relay({
      ...(busDays === undefined ? {} : { customEventBus: { retentionDays: busDays } }),
      // The monitor prunes this consumer's inbox (the same database): no sooner than it keeps records.
      ...(monitorDays === undefined ? {} : { monitorSettings: { inboxRetentionDays: monitorDays } }),
    });
    const fn = inlineFunction(stack, 'Billing', { timeout: Duration.seconds(20) });
    return new OutboxConsumer(stack, 'BillingConsumer', { ...base, existingFunction: fn, ...props });
  }

  it('refuses a bus kept 45 days beside the inbox default of 30, naming customEventBus.retentionDays and inboxRetentionDays', () => {
    let error: unknown;
    try {
      consumerOf(45);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).variable).toBe('customEventBus.retentionDays');
    expect((error as Error).message).toMatch(/45 days.*inboxRetentionDays 30/s);
  });

  it('takes the default bus (7 days), a bus of 30, and 45 days with inboxRetentionDays 60 (in the environment) and the monitor at 60', () => {
    expect(consumerOf(undefined).environment.OUTBOX_INBOX_RETENTION_DAYS).toBe('30');
    expect(() => consumerOf(30)).not.toThrow();
    expect(consumerOf(45, { inboxRetentionDays: 60 }, 60).environment.OUTBOX_INBOX_RETENTION_DAYS).toBe('60');
    // The monitor at its default 30 would prune the records the consumer counts on for 60 days.
    expect(() => consumerOf(45, { inboxRetentionDays: 60 })).toThrow(
      expect.objectContaining({ variable: 'monitorSettings.inboxRetentionDays' }),
    );
  });

  it('refuses inboxRetentionDays out of 2–3650, naming it', () => {
    for (const days of [1, 3651, 2.5]) {
      expect(() => consumerOf(undefined, { inboxRetentionDays: days })).toThrow(
        expect.objectContaining({ variable: 'inboxRetentionDays' }),
      );
    }
  });
});
