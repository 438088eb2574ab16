/**
 * The heartbeat (issue 49, docs/observe.md#the-heartbeat): the monitor enqueues one event per
 * interval through the outbox (migration 030, as the monitor role, which alone may), the relay
 * publishes it like any event, each OutboxConsumer's rule matches it, and the inbox acknowledges it
 * without calling the handler, counting HeartbeatReceived: the metric whose absence the consumer's
 * heartbeat alarm fires on. Real Postgres, the real roles, the real relay to the local bus, rules
 * from a synthesised template evaluated by the local bus's pattern matcher.
 */
import { randomUUID } from 'node:crypto';
import { Template } from 'aws-cdk-lib/assertions';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { createMonitorHandler } from '../../functions/monitor/monitor-handler.ts';
import { OutboxConsumer } from '../../infra/outbox-consumer.ts';
import { inbox } from '../../shared/consumer/index.ts';
import { matchesEventPattern } from '../../shared/local/event-pattern.ts';
import { HEARTBEAT_EVENT, loadMonitorSettings, type Sql } from '../../shared/platform/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { useHarness } from '../support/harness.ts';
import { lambdaContext } from '../support/lambda.ts';
import { testClient, testSettings } from '../support/relay.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';
import { inlineFunction, NO_BUNDLING, relayStack, SHOP, useApps } from '../support/synth.ts';

const h = useHarness({ max: 6 });
const newApp = useApps('outbox-heartbeat-test-', { context: NO_BUNDLING });
let roles: TestRoles;
beforeAll(async () => {
  roles = await createTestRoles(h.db);
});
afterAll(async () => {
  await roles?.drop();
});

const heartbeats = () =>
  h.db.sql<{ event_type: string; source: string; payload: unknown; aggregate_type: string }[]>`
    select event_type, source, payload, aggregate_type from outbox where source = ${HEARTBEAT_EVENT.source}`;

/** One run of the monitor as deployed (its handler, logged in as the monitor role). */
async function runMonitor(env: Record<string, string>) {
  const handler = createMonitorHandler({
    sql: roles.connectAs(roles.roles.monitor),
    settings: loadMonitorSettings({ ...env, OUTBOX_METRIC_NAMESPACE: 'OutboxTest' }),
  });
  return handler({}, lambdaContext(60_000, 'outbox-monitor'));
}

/** An inbox consumer whose EMF lines and handler calls are kept. */
function consumer(name: string, options: { types?: string[] } = {}) {
  const lines: Record<string, unknown>[] = [];
  const handled: string[] = [];
  const handler = inbox(
    { sql: h.db.sql, consumer: name, ...options, metrics: { write: (l) => lines.push(JSON.parse(l)) } },
    async (event) => {
      handled.push(event['detail-type']);
      return 'applied';
    },
  );
  return { handler, lines, handled, received: () => lines.filter((l) => 'HeartbeatReceived' in l) };
}

describe('the monitor enqueues the heartbeat', () => {
  it('OUTBOX_HEARTBEAT=on: one heartbeat row per interval, however many runs', async () => {
    const on = { OUTBOX_HEARTBEAT: 'on', OUTBOX_HEARTBEAT_INTERVAL_SECONDS: '3600' };
    const first = await runMonitor(on);
    const second = await runMonitor(on);
    expect(first.heartbeat).toMatchObject({ duplicate: false });
    expect(second.heartbeat).toEqual({
      eventId: (first.heartbeat as { eventId: string }).eventId,
      duplicate: true,
    });
    expect(await heartbeats()).toEqual([
      {
        event_type: 'OutboxHeartbeat',
        source: 'outbox.heartbeat',
        payload: {},
        aggregate_type: 'outbox.heartbeat',
      },
    ]);
  });

  it('off (the default, and OUTBOX_HEARTBEAT=off): none', async () => {
    const off = await runMonitor({ OUTBOX_HEARTBEAT: 'off' });
    const unset = await runMonitor({});
    expect(off.heartbeat).toBeUndefined();
    expect(unset.heartbeat).toBeUndefined();
    expect(await heartbeats()).toEqual([]);
  });

  it('only the monitor role may enqueue it: the producer, relay and consumer roles are refused', async () => {
    for (const role of [roles.roles.producer, roles.roles.relay, roles.roles.consumer]) {
      await expect(
        roles.connectAs(role)`select * from outbox_enqueue_heartbeat(300::integer)`,
        role,
      ).rejects.toMatchObject({ code: '42501' });
    }
    // And the monitor role still enqueues nothing else.
    await expect(
      roles.connectAs(
        roles.roles.monitor,
      )`select * from outbox_enqueue('T'::text, 's'::text, 'a'::text, '1'::text, '{}'::jsonb)`,
    ).rejects.toMatchObject({ code: '42501' });
    await expect(
      roles.connectAs(roles.roles.monitor)`select * from outbox_enqueue_heartbeat(30::integer)`,
    ).rejects.toThrow(/interval_seconds/);
    expect(await heartbeats()).toEqual([]);
  });
});

describe('the inbox acknowledges a heartbeat', () => {
  const heartbeatEvent = (ageMs: number) =>
    delivery({
      source: HEARTBEAT_EVENT.source,
      detailType: HEARTBEAT_EVENT.detailType,
      metadata: {
        eventId: randomUUID(),
        aggregateType: 'outbox.heartbeat',
        aggregateId: 'heartbeat',
        sequence: 7,
        occurredAt: new Date(Date.now() - ageMs).toISOString(),
      },
      data: {},
    }) as EventBridgeEvent<string, unknown>;

  it('answers heartbeat, never calls the handler, records nothing, and counts it with its age', async () => {
    // An order-aware consumer that declares its types: the heartbeat is neither refused nor a gap.
    const c = consumer('billing', { types: ['OrderPlaced'] });
    const event = heartbeatEvent(4_000);
    const answer = await c.handler(event, lambdaContext());
    expect(answer).toEqual({
      inbox: 'heartbeat',
      eventId: (event.detail as { metadata: { eventId: string } }).metadata.eventId,
    });
    expect(c.handled).toEqual([]);
    expect(await h.db.sql`select 1 from inbox_message`).toHaveLength(0);
    expect(c.received()).toHaveLength(1);
    expect(c.received()[0]).toMatchObject({
      consumer: 'billing',
      HeartbeatReceived: 1,
      _aws: {
        CloudWatchMetrics: [
          {
            Namespace: 'Outbox',
            Dimensions: [['consumer']],
            Metrics: [{ Name: 'HeartbeatReceived', Unit: 'Count' }],
          },
        ],
      },
    });
    const age = c.lines.find((l) => 'HeartbeatAgeSeconds' in l);
    expect(age?.HeartbeatAgeSeconds).toBeGreaterThanOrEqual(4);
    expect(age?.HeartbeatAgeSeconds).toBeLessThan(30);
    expect(c.lines.some((l) => 'ConsumerLag' in l)).toBe(false);
  });
});

/** The properties of an `AWS::CloudWatch::Alarm` on one metric that {@link alarmStates} reads. */
interface AlarmProperties {
  Namespace: string;
  MetricName: string;
  Dimensions: { Name: string; Value: string }[];
  Statistic: string;
  Period: number;
  EvaluationPeriods: number;
  DatapointsToAlarm?: number;
  Threshold: number;
  ComparisonOperator: string;
  TreatMissingData?: string;
}

/**
 * The alarm's state at the end of each of `periods` periods from `t0` (ms), from the EMF lines a
 * consumer wrote, as CloudWatch evaluates it: the datapoint of a period is the statistic of the
 * alarm's metric (namespace, name, dimensions) over the lines stamped in it; the alarm is ALARM
 * when at least DatapointsToAlarm of the last EvaluationPeriods datapoints breach, a missing one
 * counting as TreatMissingData says. Only what this alarm uses is modelled (Sum; the four plain
 * comparisons; missing data breaching, notBreaching or missing): anything else throws, so a
 * changed alarm fails the test rather than being misread.
 */
function alarmStates(alarm: AlarmProperties, lines: Record<string, unknown>[], t0: number, periods: number) {
  if (alarm.Statistic !== 'Sum') throw new Error(`statistic ${alarm.Statistic} is not modelled`);
  const compare: Record<string, (v: number) => boolean> = {
    LessThanThreshold: (v) => v < alarm.Threshold,
    LessThanOrEqualToThreshold: (v) => v <= alarm.Threshold,
    GreaterThanThreshold: (v) => v > alarm.Threshold,
    GreaterThanOrEqualToThreshold: (v) => v >= alarm.Threshold,
  };
  const breaches = compare[alarm.ComparisonOperator];
  if (!breaches) throw new Error(`comparison ${alarm.ComparisonOperator} is not modelled`);
  const missing = alarm.TreatMissingData ?? 'missing';
  if (!['breaching', 'notBreaching', 'missing'].includes(missing))
    throw new Error(`${missing} is not modelled`);
  const periodMs = alarm.Period * 1000;
  const sums = new Map<number, number>();
  for (const line of lines) {
    const aws = line._aws as {
      Timestamp: number;
      CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string }[] }[];
    };
    const ofAlarm = aws.CloudWatchMetrics.some(
      (d) =>
        d.Namespace === alarm.Namespace &&
        d.Metrics.some((m) => m.Name === alarm.MetricName) &&
        d.Dimensions.some(
          (set) =>
            set.length === alarm.Dimensions.length &&
            alarm.Dimensions.every((dim) => set.includes(dim.Name) && line[dim.Name] === dim.Value),
        ),
    );
    if (!ofAlarm) continue;
    const period = Math.floor((aws.Timestamp - t0) / periodMs);
    sums.set(period, (sums.get(period) ?? 0) + Number(line[alarm.MetricName]));
  }
  const states: ('OK' | 'ALARM' | 'INSUFFICIENT_DATA')[] = [];
  for (let end = 0; end < periods; end++) {
    const window = Array.from({ length: alarm.EvaluationPeriods }, (_, i) => end - i).filter((p) => p >= 0);
    const points = window.map((p) => sums.get(p));
    const counted = points.filter((v) => v !== undefined || missing !== 'missing');
    const breaching = counted.filter((v) => (v === undefined ? missing === 'breaching' : breaches(v))).length;
    if (breaching >= (alarm.DatapointsToAlarm ?? alarm.EvaluationPeriods)) states.push('ALARM');
    else if (counted.length === 0) states.push('INSUFFICIENT_DATA');
    else states.push('OK');
  }
  return states;
}

describe('end to end: monitor → outbox → relay → bus → rule → inbox', () => {
  /**
   * The rules' patterns of two consumers, one with the heartbeat (the default) and one without, and
   * the heartbeat alarm of the first as the template has it.
   */
  function synthRules(): {
    withHeartbeat: Record<string, never>;
    without: Record<string, never>;
    alarm: AlarmProperties;
  } {
    const { stack, base } = relayStack(newApp(), SHOP);
    const billing = new OutboxConsumer(stack, 'Billing', {
      ...base,
      existingFunction: inlineFunction(stack, 'B'),
    });
    const legacy = new OutboxConsumer(stack, 'Legacy', {
      ...base,
      consumer: 'legacy',
      existingFunction: inlineFunction(stack, 'L'),
      heartbeat: false,
    });
    const t = Template.fromStack(stack).toJSON().Resources as Record<
      string,
      { Properties: { EventPattern: never } }
    >;
    const patternOf = (c: OutboxConsumer) =>
      (t[stack.getLogicalId(c.rule.node.defaultChild as never)] as { Properties: { EventPattern: never } })
        .Properties.EventPattern;
    // The relay's monitor is told to send them, every 5 minutes by default.
    const monitor = Object.values(Template.fromStack(stack).findResources('AWS::Lambda::Function')).find(
      (f) =>
        (f as { Properties: { Description?: string } }).Properties.Description?.startsWith('Outbox monitor'),
    ) as { Properties: { Environment: { Variables: Record<string, unknown> } } };
    expect(monitor.Properties.Environment.Variables).toMatchObject({
      OUTBOX_HEARTBEAT: 'on',
      OUTBOX_HEARTBEAT_INTERVAL_SECONDS: '300',
    });
    expect(billing.alarms.heartbeat).toBeDefined();
    expect(legacy.alarms.heartbeat).toBeUndefined();
    const alarm = (
      t[stack.getLogicalId(billing.alarms.heartbeat?.node.defaultChild as never)] as unknown as {
        Properties: AlarmProperties;
      }
    ).Properties;
    return { withHeartbeat: patternOf(billing), without: patternOf(legacy), alarm };
  }

  it('the heartbeat reaches a consumer whose rule matches it; one whose rule does not emits no heartbeat metric', async () => {
    const rules = synthRules();
    await runMonitor({ OUTBOX_HEARTBEAT: 'on', OUTBOX_HEARTBEAT_INTERVAL_SECONDS: '300' });
    const client = testClient(h.bus.url);
    await runRelay({ sql: h.db.sql as Sql, client, settings: testSettings(), untilEmpty: true });
    client.destroy();
    expect(h.bus.events.map((e) => [e.source, e.detailType])).toEqual([
      ['outbox.heartbeat', 'OutboxHeartbeat'],
    ]);

    const billing = consumer('billing');
    const legacy = consumer('legacy');
    for (const accepted of h.bus.events) {
      const event = {
        version: '0',
        id: accepted.id,
        'detail-type': accepted.detailType,
        source: accepted.source,
        account: '123456789012',
        time: accepted.time ?? new Date().toISOString(),
        region: 'eu-west-1',
        resources: [],
        detail: accepted.detail,
      } as EventBridgeEvent<string, unknown>;
      for (const [pattern, c] of [
        [rules.withHeartbeat, billing],
        [rules.without, legacy],
      ] as const) {
        if (matchesEventPattern(pattern, event)) await c.handler(event, lambdaContext());
      }
    }
    expect(billing.received()).toHaveLength(1);
    expect(billing.handled).toEqual([]);
    // The legacy consumer's rule never matched: no HeartbeatReceived, the alarm's condition.
    expect(legacy.received()).toHaveLength(0);
    expect(legacy.lines).toHaveLength(0);
  }, 240_000);

  it("the heartbeat alarm stays OK while the consumer's rule matches, and is in ALARM within its own window once the rule no longer does", async () => {
    const { withHeartbeat, without, alarm } = synthRules();
    expect(alarm).toMatchObject({
      MetricName: 'HeartbeatReceived',
      Dimensions: [{ Name: 'consumer', Value: 'billing' }],
      TreatMissingData: 'breaching',
    });
    // N: the alarm's own window, from the template (3 × 5 min by default).
    const windowMinutes = (alarm.EvaluationPeriods * alarm.Period) / 60;
    const periodsToAlarm = alarm.DatapointsToAlarm ?? alarm.EvaluationPeriods;
    await runMonitor({ OUTBOX_HEARTBEAT: 'on', OUTBOX_HEARTBEAT_INTERVAL_SECONDS: String(alarm.Period) });
    const client = testClient(h.bus.url);
    await runRelay({ sql: h.db.sql as Sql, client, settings: testSettings(), untilEmpty: true });
    client.destroy();
    const [accepted] = h.bus.events;
    expect(accepted?.source).toBe(HEARTBEAT_EVENT.source);
    const event = {
      version: '0',
      id: accepted?.id,
      'detail-type': accepted?.detailType,
      source: accepted?.source,
      account: '123456789012',
      time: accepted?.time ?? new Date().toISOString(),
      region: 'eu-west-1',
      resources: [],
      detail: accepted?.detail,
    } as EventBridgeEvent<string, unknown>;

    /**
     * One heartbeat per interval for `periods` intervals, through `patternAt(i)` (the rule in force
     * in interval i) to a `billing` inbox; its EMF lines stamped in the middle of their interval.
     */
    const t0 = Date.UTC(2026, 0, 1);
    const simulate = async (periods: number, patternAt: (i: number) => Record<string, never>) => {
      const billing = consumer('billing');
      for (let i = 0; i < periods; i++) {
        const before = billing.lines.length;
        if (matchesEventPattern(patternAt(i), event)) await billing.handler(event, lambdaContext());
        for (const line of billing.lines.slice(before)) {
          (line._aws as { Timestamp: number }).Timestamp = t0 + (i + 0.5) * alarm.Period * 1000;
        }
      }
      return alarmStates(alarm, billing.lines, t0, periods);
    };

    const horizon = 4 * alarm.EvaluationPeriods;
    const matching = await simulate(horizon, () => withHeartbeat);
    expect(matching).toEqual(Array(horizon).fill('OK'));

    // The rule stops matching the heartbeat after `stopAt` intervals (narrowed by hand, say).
    const stopAt = alarm.EvaluationPeriods;
    const stopped = await simulate(horizon, (i) => (i < stopAt ? withHeartbeat : without));
    const firstAlarm = stopped.indexOf('ALARM');
    expect(stopped.slice(0, firstAlarm)).toEqual(Array(firstAlarm).fill('OK'));
    expect(stopped.slice(firstAlarm)).toEqual(Array(horizon - firstAlarm).fill('ALARM'));
    // In ALARM at the end of the periodsToAlarm-th period without a heartbeat: within N minutes.
    const minutesToAlarm = ((firstAlarm + 1 - stopAt) * alarm.Period) / 60;
    expect(firstAlarm + 1 - stopAt).toBe(periodsToAlarm);
    expect(minutesToAlarm).toBeLessThanOrEqual(windowMinutes);

    // A consumer whose rule never matched: ALARM from the first full window on (missing is breaching).
    const never = await simulate(horizon, () => without);
    expect(never.indexOf('ALARM')).toBe(periodsToAlarm - 1);
  }, 240_000);
});
