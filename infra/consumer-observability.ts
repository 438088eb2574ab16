/**
 * What the `OutboxConsumer` watches: its alarms (each notifying `alarmTopic`), the inbox's parked
 * metric, and its dashboard widgets.
 */
import { Annotations, Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as eventsv2 from 'aws-cdk-lib/aws-eventsv2';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import {
  DEFAULT_METRIC_NAMESPACE,
  INBOX_METRIC_DIMENSION,
  InboxMetricName,
} from '../shared/platform/names.ts';
import type { OutboxConsumerProps } from './consumer-props.ts';
import { EVENTSV2_NAMESPACE } from './custom-event-bus.ts';

/** The consumer's alarms. */
export interface OutboxConsumerAlarms {
  /**
   * EventBridge could not deliver events into Lambda (the dead-letter queue holds them); on a
   * Custom Event Bus, the handler failed every attempt too (the records carry no payload).
   */
  readonly undelivered: cloudwatch.Alarm;
  /**
   * The handler failed on every attempt (the on-failure queue holds the invocation records); on
   * a Custom Event Bus, the subscriber dropped events (`EventsDropped` in `AWS/EventsV2`: the
   * dead-letter queue refused them).
   */
  readonly failed: cloudwatch.Alarm;
  /**
   * The function's failed invocations less the inbox's designed gap retries
   * ({@link consumerFailedInvocationsMetric}), over `errorsAlarmThreshold` in 5 minutes.
   */
  readonly errors: cloudwatch.Alarm;
  /** The inbox parked events (`onGapTimeout: 'park'`), emitted by the function itself. */
  readonly parked: cloudwatch.Alarm;
  /**
   * Queue topology: the queue's oldest message is over an hour old (the function is not keeping
   * up, or not reading at all); undefined in the direct topology.
   */
  readonly queueAge: cloudwatch.Alarm | undefined;
  /**
   * The p99 of `ConsumerLag` (seconds from the outbox's commit to the inbox's, emitted by the
   * function for every applied event) over `consumerLagAlarmSeconds` in 5 minutes.
   */
  readonly consumerLag: cloudwatch.Alarm;
  /**
   * No heartbeat reached the consumer for 3 heartbeat intervals (`HeartbeatReceived`, missing data
   * breaching); undefined without the heartbeat.
   */
  readonly heartbeat: cloudwatch.Alarm | undefined;
}

/** What the alarms and widgets watch: the parts of an `OutboxConsumer` (the construct is one). */
export interface WatchedConsumer {
  readonly function: lambda.IFunction;
  readonly deadLetterQueue: sqs.IQueue;
  readonly failedEventsQueue: sqs.IQueue;
  readonly queue: sqs.Queue | undefined;
  readonly topology: 'direct' | 'queue';
  readonly subscriber: eventsv2.CfnSubscriber | undefined;
  /** The relay monitor's heartbeat interval, minutes; undefined without the heartbeat. */
  readonly heartbeatMinutes: number | undefined;
}

/** Heartbeat intervals without a heartbeat before the `heartbeat` alarm fires. */
export const HEARTBEAT_MISSED_INTERVALS = 3;

/** The heartbeats that reached the consumer, per `minutes` (the metric of the `heartbeat` alarm). */
export function consumerHeartbeatMetric(props: OutboxConsumerProps, minutes: number): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace: props.metricNamespace ?? DEFAULT_METRIC_NAMESPACE,
    metricName: InboxMetricName.HeartbeatReceived,
    dimensionsMap: { [INBOX_METRIC_DIMENSION]: props.consumer },
    statistic: 'Sum',
    period: Duration.minutes(minutes),
  });
}

/** The inbox's parked events, as the function emits them: the metric of the `parked` alarm. */
export function consumerParkedMetric(props: OutboxConsumerProps): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace: props.metricNamespace ?? DEFAULT_METRIC_NAMESPACE,
    metricName: InboxMetricName.Parked,
    dimensionsMap: { [INBOX_METRIC_DIMENSION]: props.consumer },
    statistic: 'Sum',
    period: Duration.minutes(5),
  });
}

/**
 * Seconds from the outbox's commit to the inbox's, per applied event, as the function emits it
 * (EMF, one value per event): the metric of the `consumerLag` alarm (p99 per 5 minutes).
 */
export function consumerLagMetric(props: OutboxConsumerProps, statistic = 'p99'): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace: props.metricNamespace ?? DEFAULT_METRIC_NAMESPACE,
    metricName: InboxMetricName.ConsumerLag,
    dimensionsMap: { [INBOX_METRIC_DIMENSION]: props.consumer },
    statistic,
    period: Duration.minutes(5),
  });
}

/** The default of `consumerLagAlarmSeconds`: the relay's own lag alarm's default, 5 minutes. */
export const DEFAULT_CONSUMER_LAG_ALARM_SECONDS = 300;

/**
 * The function's failed invocations that are not designed retries: its `Errors` (AWS/Lambda, Sum
 * per 5 minutes) less the inbox's `InboxGapRetry` (a `wait-for-gap` invocation that failed with
 * `InboxGapError` on purpose, so that Lambda retries the event once the missing one may have come).
 * What the `errors` alarm watches: a gap that closes within its retries never pages; any other
 * failure does, and a gap that outlasts every retry lands in the failure queue (the `failed`
 * alarm). Both counts are emitted as the invocation ends, in the same 5-minute period but for an
 * invocation that straddles two of them.
 */
export function consumerFailedInvocationsMetric(
  props: OutboxConsumerProps,
  fn: lambda.IFunction,
): cloudwatch.IMetric {
  const period = Duration.minutes(5);
  return new cloudwatch.MathExpression({
    expression: 'errors - FILL(gapRetries, 0)',
    usingMetrics: {
      errors: fn.metricErrors({ period, statistic: 'Sum' }),
      gapRetries: new cloudwatch.Metric({
        namespace: props.metricNamespace ?? DEFAULT_METRIC_NAMESPACE,
        metricName: InboxMetricName.GapRetry,
        dimensionsMap: { [INBOX_METRIC_DIMENSION]: props.consumer },
        statistic: 'Sum',
        period,
      }),
    },
    period,
    label: 'errors, less designed gap retries',
  });
}

/** See {@link OutboxConsumer.widgets}. */
export function createConsumerWidgets(
  props: OutboxConsumerProps,
  consumer: WatchedConsumer,
): cloudwatch.IWidget[] {
  const name = props.consumer;
  const period = Duration.minutes(5);
  const visible = (q: sqs.IQueue, label: string) =>
    q.metricApproximateNumberOfMessagesVisible({ period, statistic: 'Maximum', label });
  // One row of 24 units: four widgets 6 wide, or five 4 wide with the queue's.
  const size = { width: consumer.queue ? 4 : 6, height: 6 };
  const widgets: cloudwatch.IWidget[] = [
    new cloudwatch.GraphWidget({
      ...size,
      title: `${name}: failure queues (messages)`,
      left:
        consumer.failedEventsQueue === consumer.deadLetterQueue
          ? [visible(consumer.deadLetterQueue, 'undelivered or failed (dead-letter queue)')]
          : [
              visible(consumer.deadLetterQueue, 'undelivered (dead-letter queue)'),
              visible(consumer.failedEventsQueue, 'failed (failed-events queue)'),
            ],
    }),
    new cloudwatch.GraphWidget({
      ...size,
      title: `${name}: invocations and errors (count)`,
      left: [
        consumer.function.metricInvocations({ period, statistic: 'Sum' }),
        consumer.function.metricErrors({ period, statistic: 'Sum' }),
      ],
    }),
    new cloudwatch.GraphWidget({
      ...size,
      title: `${name}: duration (ms), parked events`,
      left: [
        consumer.function.metricDuration({ period, statistic: 'p50', label: 'duration p50' }),
        consumer.function.metricDuration({ period, statistic: 'p99', label: 'duration p99' }),
      ],
      right: [consumerParkedMetric(props).with({ label: 'parked events' })],
    }),
    // The whole way from the outbox's commit, beside the relay's own lag (oldest pending event)
    // when the row is on the relay's dashboard.
    new cloudwatch.GraphWidget({
      ...size,
      title: `${name}: lag from the outbox's commit (s)${consumer.heartbeatMinutes === undefined ? '' : ', heartbeats'}`,
      left: [
        consumerLagMetric(props, 'p50').with({ label: 'ConsumerLag p50' }),
        consumerLagMetric(props, 'p99').with({ label: 'ConsumerLag p99' }),
      ],
      ...(consumer.heartbeatMinutes === undefined
        ? {}
        : { right: [consumerHeartbeatMetric(props, 5).with({ label: 'heartbeats received' })] }),
    }),
  ];
  if (consumer.queue) {
    widgets.push(
      new cloudwatch.GraphWidget({
        ...size,
        title: `${name}: queue (messages, age in s)`,
        left: [visible(consumer.queue, 'visible messages')],
        right: [
          consumer.queue.metricApproximateAgeOfOldestMessage({
            period,
            statistic: 'Maximum',
            label: 'oldest message age (s)',
          }),
        ],
      }),
    );
  }
  return widgets;
}

/** The consumer's alarms (see {@link OutboxConsumerAlarms}), each notifying `alarmTopic` when one is given. */
export function createConsumerAlarms(
  scope: Construct,
  props: OutboxConsumerProps,
  consumer: WatchedConsumer,
): OutboxConsumerAlarms {
  const alarm = (
    name: string,
    metric: cloudwatch.IMetric,
    description: string,
    threshold = 0,
    options: Partial<cloudwatch.AlarmProps> = {},
  ) => {
    const created = new cloudwatch.Alarm(scope, name, {
      alarmDescription: description,
      metric,
      threshold,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      ...options,
    });
    if (props.alarmTopic) created.addAlarmAction(new cwActions.SnsAction(props.alarmTopic));
    return created;
  };
  const visible = (q: sqs.IQueue) =>
    q.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(5), statistic: 'Maximum' });
  const name = props.consumer;
  const lagSeconds = props.consumerLagAlarmSeconds ?? DEFAULT_CONSUMER_LAG_ALARM_SECONDS;
  // Both topologies and both buses: the function emits it for every applied event.
  const consumerLag = () =>
    alarm(
      'ConsumerLagAlarm',
      consumerLagMetric(props),
      `The ${name} consumer applies events late: the p99 of ConsumerLag (seconds from the outbox's commit to the inbox's) was over ${lagSeconds} s in 5 minutes. Where it waits: the relay (its LagAlarm, outbox status), the delivery (the function's Throttles and ConcurrentExecutions${consumer.queue ? ", the queue's oldest message age" : ''}), or the handler (its Duration, an order: 'wait-for-gap' chain waiting for a missing event).`,
      lagSeconds,
    );
  const heartbeat = () => {
    const minutes = consumer.heartbeatMinutes;
    if (minutes === undefined) return undefined;
    const after = minutes * HEARTBEAT_MISSED_INTERVALS;
    const delivery = consumer.subscriber
      ? `the subscriber: its dead-letter queue, and EventsDropped and the delivery metrics of ${EVENTSV2_NAMESPACE}`
      : `the rule: its MatchedEvents, FailedInvocations and the dead-letter queue (AWS/Events)${consumer.queue ? "; the queue's oldest message age" : ''}`;
    return alarm(
      'HeartbeatAlarm',
      consumerHeartbeatMetric(props, minutes),
      `No heartbeat reached the ${name} consumer for ${after} minutes: events from the outbox may not be reaching it either (the relay's monitor enqueues one every ${minutes} min). Where it stopped, in order: 1. the monitor (its log: heartbeat failed); 2. the relay: outbox status (a pending OutboxHeartbeat means the relay is not publishing; its LagAlarm, its log); 3. the bus: the relay's PutEvents failures (its log); 4. ${delivery}; 5. the consumer: the function's Errors and Throttles, its log group. Other consumers' heartbeat alarms tell a shared cause (1-3) from this consumer's own (4-5).`,
      1,
      {
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluationPeriods: HEARTBEAT_MISSED_INTERVALS,
        datapointsToAlarm: HEARTBEAT_MISSED_INTERVALS,
        // No data is no heartbeat: the function emits nothing when none arrives.
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      },
    );
  };
  if (consumer.subscriber) {
    const subscriberMetric = (metricName: string) =>
      new cloudwatch.Metric({
        namespace: EVENTSV2_NAMESPACE,
        metricName,
        dimensionsMap: {
          EventBus: props.customEventBusArn as string,
          Subscriber: (consumer.subscriber as eventsv2.CfnSubscriber).attrSubscriberArn,
        },
        statistic: 'Sum',
        period: Duration.minutes(5),
      });
    const fromBus =
      'the record carries no payload (the event is published in the outbox, not a dead letter): replay it from the bus with a subscriber at StartingPosition POINT_IN_TIME before it and Transformer WITH_METADATA; the inbox applies what it has not applied and skips the rest as duplicates.';
    return {
      undelivered: alarm(
        'UndeliveredAlarm',
        visible(consumer.deadLetterQueue),
        `The ${name} consumer's Custom Event Bus subscriber could not deliver events, or its handler failed on every attempt, after its retries (the dead-letter queue holds their records; ${fromBus}) Fix the cause, then replay.`,
      ),
      failed: alarm(
        'FailedEventsAlarm',
        subscriberMetric('EventsDropped'),
        `The ${name} consumer's Custom Event Bus subscriber dropped events (its dead-letter queue refused them): ${fromBus}`,
      ),
      errors: alarm(
        'ErrorsAlarm',
        consumerFailedInvocationsMetric(props, consumer.function),
        `The ${name} consumer's function failed invocations, not counting wait-for-gap's designed retries (InboxGapRetry): the subscriber retries them, holding up their aggregate; those that fail every attempt are dead-lettered. Its log group says why.`,
        props.errorsAlarmThreshold ?? 0,
      ),
      parked: alarm(
        'ParkedAlarm',
        consumerParkedMetric(props),
        `The ${name} inbox parked events: an earlier one of the same chain was still missing after the gap wait. Run: outbox inbox parked list --consumer ${name}; then replay or discard each.`,
      ),
      queueAge: undefined,
      consumerLag: consumerLag(),
      heartbeat: heartbeat(),
    };
  }
  // The command that lists and replays both failure queues, with their URLs and the function's
  // name filled in at deploy time (docs/consumer-operations.md#failure-queues). CloudWatch takes at most
  // 1,024 characters: when the text with the longest URLs and function name could exceed it (a
  // long consumer name), the command is given once, to run with --dry-run first.
  const failureText = (intro: string) => {
    const text = (queue1: string, queue2: string, fn: string, withList: boolean) => {
      const queues = `--queue-url ${queue1} --queue-url ${queue2}`;
      const replay = `outbox inbox queue replay ${queues} --consumer ${shellWord(name)} --function-name ${fn}`;
      return withList
        ? `${intro} run: outbox inbox queue list ${queues}; then ${replay} (in each aggregate's order; the inbox applies each event once).`
        : `${intro} run: ${replay} (with --dry-run first to see them; in each aggregate's order, the inbox applies each event once).`;
    };
    const fits =
      text('q'.repeat(MAX_QUEUE_URL), 'q'.repeat(MAX_QUEUE_URL), 'f'.repeat(MAX_FUNCTION_NAME), true)
        .length <= MAX_ALARM_DESCRIPTION;
    return text(
      consumer.failedEventsQueue.queueUrl,
      consumer.deadLetterQueue.queueUrl,
      consumer.function.functionName,
      fits,
    );
  };
  return {
    undelivered: alarm(
      'UndeliveredAlarm',
      visible(consumer.deadLetterQueue),
      failureText(
        `EventBridge could not deliver events to the ${name} consumer's ${consumer.queue ? 'queue' : 'function'} (the messages are the events, the error in their attributes). Fix the cause, then`,
      ),
    ),
    failed: alarm(
      'FailedEventsAlarm',
      visible(consumer.failedEventsQueue),
      failureText(
        `The ${name} consumer's handler failed on every ${consumer.topology === 'direct' ? 'attempt' : 'receive'} for some events (${consumer.topology === 'direct' ? "each message is Lambda's record: the event and the error" : "the messages are the events; the errors are in the function's logs and outbox inbox failed list"}). Fix the cause, then`,
      ),
    ),
    errors: alarm(
      'ErrorsAlarm',
      consumerFailedInvocationsMetric(props, consumer.function),
      `The ${name} consumer's function failed invocations, not counting wait-for-gap's designed retries (InboxGapRetry): Lambda retries them; those that fail every attempt land in the failed-events queue. Its log group says why.`,
      props.errorsAlarmThreshold ?? 0,
    ),
    // Emitted by the inbox in the function itself (an EMF line per parked event).
    parked: alarm(
      'ParkedAlarm',
      consumerParkedMetric(props),
      `The ${name} inbox parked events: an earlier one of the same chain was still missing after the gap wait. Run: outbox inbox parked list --consumer ${name}; then replay or discard each.`,
    ),
    queueAge: consumer.queue
      ? alarm(
          'QueueAgeAlarm',
          consumer.queue.metricApproximateAgeOfOldestMessage({
            period: Duration.minutes(5),
            statistic: 'Maximum',
          }),
          `The ${name} consumer's queue holds a message over an hour old: the function is not keeping up or not reading (its event source mapping disabled, failing invocations). Messages expire after 7 days.`,
          3_600,
        )
      : undefined,
    consumerLag: consumerLag(),
    heartbeat: heartbeat(),
  };
}

/** What {@link warnOnUnwatchedInbox} compares: an `OutboxRelay` in the same app. */
export interface WatchingRelay {
  readonly busKind: 'classic' | 'custom';
  readonly eventBus: { readonly eventBusArn: string };
  readonly customEventBusArn: string | undefined;
  readonly databaseConnection: { readonly host: string };
  readonly databaseName: string;
}

/** The app's relay that publishes to the consumer's bus, if any. */
export function relayOfConsumer<R extends Pick<WatchingRelay, 'busKind' | 'eventBus' | 'customEventBusArn'>>(
  props: OutboxConsumerProps,
  relays: readonly R[],
): R | undefined {
  return relays.find((r) =>
    props.customEventBusArn !== undefined
      ? r.customEventBusArn === props.customEventBusArn
      : r.busKind === 'classic' && r.eventBus.eventBusArn === props.eventBus?.eventBusArn,
  );
}

/**
 * The heartbeat interval the consumer alarms on, minutes (see `OutboxConsumerProps.heartbeat`):
 * its relay's, 5 without a relay in the app, undefined when off.
 */
export function consumerHeartbeatMinutes(
  props: OutboxConsumerProps,
  relay: { readonly heartbeatInterval: Duration | undefined } | undefined,
): number | undefined {
  if (props.heartbeat === false) return undefined;
  if (!relay) return 5;
  const interval = relay.heartbeatInterval;
  if (interval === undefined) return props.heartbeat === true ? 5 : undefined;
  return interval.toMinutes();
}

/**
 * Warns at synth when the consumer's inbox is in a database the relay's monitor does not watch:
 * the monitor prunes inbox tables and counts parked and failed events (`InboxParkedCount`,
 * `InboxFailedCount`, their alarms) only in the outbox's database, so an inbox elsewhere grows
 * without bound and its parked and failed events page no one. The relay is the `OutboxRelay` of the
 * app whose bus the consumer subscribes to; a consumer whose relay is not in the app (another
 * stack's app, another account) cannot be checked, and is told so once, as information.
 */
export function warnOnUnwatchedInbox(
  scope: Construct,
  props: OutboxConsumerProps,
  host: string,
  relays: readonly WatchingRelay[],
): void {
  const relay = relayOfConsumer(props, relays);
  const remedy =
    'Prune and count its inbox on a schedule of its own (maintainInbox from @outbox-relay-aws/consumer/operations, or ' +
    '`outbox-inbox prune` and `outbox-inbox metrics`), and alarm on InboxParkedCount with dimension consumer ' +
    '(docs/consumer-operations.md#a-consumer-in-its-own-database).';
  if (!relay) {
    Annotations.of(scope).addInfo(
      `OutboxConsumer ${props.consumer}: no OutboxRelay of this app publishes to its bus, so whether the relay's monitor prunes and counts its inbox is not checked. If its inbox is not in the outbox's database: ${remedy}`,
    );
    return;
  }
  if (relay.databaseConnection.host === host && relay.databaseName === props.databaseName) return;
  Annotations.of(scope).addWarningV2(
    'outbox-relay:inbox-unwatched',
    `OutboxConsumer ${props.consumer}: its inbox is in database ${props.databaseName}${relay.databaseConnection.host === host ? '' : ' on another server'}, not in the outbox's (${relay.databaseName}), which is the only one the relay's monitor prunes and counts: its inbox would grow without bound, and its parked and failed events would raise no alarm. ${remedy}`,
  );
}

/** CloudWatch's limit on an alarm's description, characters. */
const MAX_ALARM_DESCRIPTION = 1_024;
/**
 * The longest queue URL: `https://sqs.<region>.amazonaws.com.cn/<account>/` (a 14-character region)
 * and an 80-character name, SQS's longest.
 */
const MAX_QUEUE_URL = 'https://sqs.ap-southeast-1.amazonaws.com.cn/123456789012/'.length + 80;
/** Lambda's longest function name. */
const MAX_FUNCTION_NAME = 64;

/** `word` as one shell word: as is when nothing in it is special to a shell, else single-quoted. */
function shellWord(word: string): string {
  return /^[A-Za-z0-9_.,:@%+=/-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}
