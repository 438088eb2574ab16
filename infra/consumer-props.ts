/**
 * The `OutboxConsumer`'s props and the limits they are checked against (consumer-validation.ts),
 * with the inbox settings that follow from the delivery.
 */
import type { Duration } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as events from 'aws-cdk-lib/aws-events';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { OutboxDatabaseTarget } from './database.ts';

/**
 * An event type the consumer subscribes to: what `defineEvent` returns (shared/producer/typed-events.ts)
 * has this shape, so pass the definitions themselves. Only `type` and `source` are read.
 */
export interface OutboxConsumerEvent {
  /** The DetailType. */
  readonly type: string;
  /** The Source the producer enqueues it under; required here, since the rule matches on it. */
  readonly source?: string | undefined;
}

/**
 * Lambda's retry window of a failed asynchronous invocation, seconds after the first attempt, by
 * `retryAttempts`: the retries come one minute and then two minutes apart ("How Lambda handles
 * errors and retries with asynchronous invocation", AWS Lambda Developer Guide). The inbox's
 * `retryWindowSeconds` must match it (it bounds `gapWaitSeconds`).
 */
export const RETRY_WINDOW_SECONDS_BY_ATTEMPTS: Readonly<Record<0 | 1 | 2, number>> = { 0: 0, 1: 60, 2: 180 };

/**
 * The longest visibility timeout of the queue topology's queue, seconds. The monitor counts an
 * inbox event that failed as failed (`InboxFailedCount`, alarmed on) once its last attempt is 300 s
 * old with no retry since (INBOX_FAILED_SETTLE_SECONDS, shared/relay/operations/status.ts); a
 * message that failed is received again one visibility timeout after its last receive, so that
 * timeout must stay well under 300 s.
 */
export const MAX_QUEUE_VISIBILITY_SECONDS = 240;

/**
 * The longest a Custom Event Bus subscriber waits for a Lambda invocation, seconds
 * (`LambdaParameters.InvocationTimeoutSeconds`, 1–30, EventBridge User Guide, "Lambda function
 * target"). A function that may run longer would be retried while it still runs: refused.
 */
export const CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS = 30;

/**
 * The longest event pattern a Custom Event Bus subscriber's filter takes, characters
 * (`AWS::EventsV2::Subscriber` `Filter.Pattern`, Maximum 4096, CloudFormation Template Reference).
 * Longer, the template synthesises and the deployment fails: refused at synth.
 */
export const CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH = 4_096;

/**
 * Default of `deliveryMaxEventAge` on a Custom Event Bus, seconds: how long the subscriber retries
 * an event whose handler fails before it goes to the dead-letter queue. The subscriber's own
 * default (300 s) would dead-letter events through a database failover or a bad deploy; an hour
 * rides those out, and a poison event holds up only its own aggregate meanwhile (FIFO per group).
 */
export const CUSTOM_BUS_DEFAULT_MAX_EVENT_AGE_SECONDS = 3_600;

/** The inbox's largest `maxEventAgeSeconds` (shared/consumer/inbox.ts), seconds. */
export const INBOX_MAX_EVENT_AGE_SECONDS = 21_600;

/** The inbox settings that depend on how the function is invoked; see {@link OutboxConsumer.inboxSettings}. */
export interface OutboxConsumerInboxSettings {
  /**
   * The inbox's `retryWindowSeconds`. Direct: 180 for 2 retries, 60 for 1, 0 for none. Custom
   * Event Bus: `deliveryMaxEventAge` (the subscriber retries a failed handler until then). Queue:
   * `(maxReceiveCount − 1) × visibilityTimeout` (each retry comes a visibility timeout after the
   * previous receive, never earlier).
   */
  readonly retryWindowSeconds: number;
  /**
   * The inbox's `maxEventAgeSeconds`. Direct: the function's `MaximumEventAgeInSeconds`. Custom
   * Event Bus: `deliveryMaxEventAge`. Queue:
   * 21,600, the inbox's largest (a receive can come later than the visibility timeout when the
   * function is throttled).
   */
  readonly maxEventAgeSeconds: number;
}

/** Props of {@link OutboxConsumer}. Where the function connects: one of `proxy`, `instance` or `cluster`. */
export interface OutboxConsumerProps extends OutboxDatabaseTarget {
  /**
   * The consumer's name: the inbox's `consumer` option, the `consumer` dimension of its metrics,
   * and its database role `outbox_consumer_<name>`. Non-empty, no comma, a role name of at most 63 bytes.
   */
  readonly consumer: string;
  /**
   * - `direct` (default): the rule invokes the function asynchronously, one event per invocation;
   *   Lambda retries a failed one (`retryAttempts`) and then sends its record (the event and the
   *   error) to `failedEventsQueue`.
   * - `queue`: the rule sends to an SQS queue; the function reads it in batches (`batchSize`) with
   *   `ReportBatchItemFailures`, so its handler must be `sqsBatch(inbox(…))`; a message received
   *   `maxReceiveCount` times goes to `failedEventsQueue` (the event itself, without the error). It
   *   buffers bursts and bounds the function's concurrency (`maxConcurrency`).
   * @default 'direct'
   */
  readonly topology?: 'direct' | 'queue';
  /**
   * The classic bus the relay publishes to: `relay.eventBus` of an {@link OutboxRelay}. Exactly
   * one of `eventBus` and `customEventBusArn`.
   * @default none
   */
  readonly eventBus?: events.IEventBus;
  /**
   * The Custom Event Bus (EventsV2) the relay publishes to: `relay.customEventBusArn`. Instead of
   * a rule, an `AWS::EventsV2::Subscriber` of type `FIFO` invokes the function synchronously
   * (`REQUEST_RESPONSE`), one event per invocation, each aggregate's events in order, waiting for
   * each result; a failed handler is retried by the subscriber (`deliveryRetryAttempts`,
   * `deliveryMaxEventAge`, default 185 and 1 hour) and then recorded in `deadLetterQueue` (the
   * record carries no payload). With `topology: 'queue'` the subscriber sends instead to an SQS
   * FIFO queue (`MessageGroupId` the aggregate, `MessageDeduplicationId` the event id) that the
   * function reads with `sqsBatch(inbox(…))`, redriving to a FIFO `failedEventsQueue`: a bursty
   * consumer keeps its buffer beside the direct FIFO consumers of the same bus. Refused with it:
   * `retryAttempts` and `maxEventAge` (Lambda's asynchronous retries, unused),
   * `existingFailedEventsQueue`, a direct-topology function timeout over 30 s,
   * `deliveryMaxEventAge` over 6 hours.
   * (docs/consumer-deploying.md#on-a-custom-event-bus-eventsv2)
   * @default none
   */
  readonly customEventBusArn?: string;
  /**
   * Custom Event Bus only: the inbox's `parkAfterAttempts` (`OUTBOX_INBOX_PARK_AFTER_ATTEMPTS`): after
   * this many failed handler calls the event is parked, acknowledged, and its aggregate's later
   * events parked behind it, in order, for `outbox inbox parked replay`. A FIFO subscriber's failed
   * call holds up every group of the subscriber, retried up to `deliveryRetryAttempts` times: this
   * bounds how long one poison event delays the other aggregates. `false`: never park (the event
   * is retried, then dead-lettered, and its aggregate moves on past it).
   * (docs/buses.md#a-failing-event-on-a-custom-event-bus)
   * @default 3
   */
  readonly parkAfterAttempts?: number | false;
  /**
   * The event types to subscribe to, e.g. `[OrderPlaced]` from `defineEvent`. The rule matches
   * `source` ∈ their sources and `detail-type` ∈ their types; with several sources that is every
   * combination of the two lists, so declare the inbox's `types` to refuse a type it does not expect.
   */
  readonly events: readonly OutboxConsumerEvent[];
  /**
   * The handler's source file (exporting `handler`), bundled with esbuild by NodejsFunction, locally
   * (never Docker: synth fails if esbuild cannot be found). Exactly one of `entry` and `existingFunction`.
   * @default none
   */
  readonly entry?: string;
  /**
   * Your own function instead. The construct then sets its asynchronous invocation (retries, event
   * age, on-failure destination) and grants it the database login; it adds the environment
   * variables only to a `lambda.Function` (of an imported one, set them yourself from
   * {@link OutboxConsumer.environment}).
   * @default none
   */
  readonly existingFunction?: lambda.IFunction;
  /**
   * Overrides of the bundled function's props (memory, timeout, bundling, projectRoot,
   * depsLockFilePath, extra environment…), with `entry` only.
   * @default Node.js 24, Arm, 256 MB, 30 s, bundled with {@link OUTBOX_BUNDLING}
   */
  readonly functionProps?: Partial<nodejs.NodejsFunctionProps>;
  /** VPC of the bundled function (the database's). @default no VPC */
  readonly vpc?: ec2.IVpc;
  /** Its subnets. @default the VPC's private subnets */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /** Its security groups; the proxy (or instance, cluster) must accept them on its port. @default none */
  readonly securityGroups?: ec2.ISecurityGroup[];
  /** Log retention of the bundled function. @default one month */
  readonly logRetention?: logs.RetentionDays;
  /** Database name. */
  readonly databaseName: string;
  /**
   * The database user the function logs in as, with IAM. The migration creates it when the relay's
   * `migration.inboxConsumers` lists the consumer (`outbox migrate --roles --consumer <name>`).
   * @default `outbox_consumer_<consumer>`, which touches only this consumer's inbox rows
   */
  readonly databaseUser?: string;
  /**
   * Lambda's retries of a failed invocation, 0 to 2; sets the inbox's `retryWindowSeconds`.
   * @default 2 (Lambda's default)
   */
  readonly retryAttempts?: 0 | 1 | 2;
  /**
   * How long Lambda keeps an event for a retry, 60 s to 6 h, at least the retry window.
   * @default 6 hours (Lambda's default)
   */
  readonly maxEventAge?: Duration;
  /**
   * Queue topology: the queue's visibility timeout, at least the function's timeout and at most
   * {@link MAX_QUEUE_VISIBILITY_SECONDS}.
   * @default six times the function's timeout (AWS's advice for an SQS event source), at most 240 s
   */
  readonly visibilityTimeout?: Duration;
  /**
   * Queue topology: receives of a message before it goes to `failedEventsQueue`, 1 to 50. A
   * throttled receive counts too, so keep a few (AWS advises at least 5).
   * @default 5
   */
  readonly maxReceiveCount?: number;
  /** Queue topology: messages per invocation, 1 to 10 (one inbox transaction each, one after the other). @default 10 */
  readonly batchSize?: number;
  /** Queue topology: most concurrent invocations the event source mapping makes, 2 to 1000. @default no limit */
  readonly maxConcurrency?: number;
  /**
   * The rule target's retries of a delivery into Lambda (throttled Invoke API, missing permission), 0 to 185;
   * on a Custom Event Bus, the subscriber's retries of a failed invocation (handler errors included).
   * @default 185 (EventBridge's default)
   */
  readonly deliveryRetryAttempts?: number;
  /**
   * How long EventBridge retries a delivery, 60 s to 24 h; on a Custom Event Bus, at most 6 h (the
   * inbox's largest event age), and it is the inbox's retry window.
   * @default 24 hours (EventBridge's default); 1 hour on a Custom Event Bus ({@link CUSTOM_BUS_DEFAULT_MAX_EVENT_AGE_SECONDS})
   */
  readonly deliveryMaxEventAge?: Duration;
  /**
   * How long the inbox keeps its records, days, 2 to 3,650: the inbox's `retentionDays`
   * (`OUTBOX_INBOX_RETENTION_DAYS` in the function's environment). An event with no record older
   * than this is answered `stale` (`beyond-retention`), never applied again. Checked at synth
   * against the `OutboxRelay`s of the app (infra/retention.ts): synthesis fails when the monitor of
   * a relay in this inbox's database prunes sooner (its `monitorSettings.inboxRetentionDays`: an
   * event delivered again between the two ages would be applied twice), and when a Custom Event
   * Bus created by the relay keeps events longer (`customEventBus.retentionDays`: a replay of
   * them would find their records pruned); an archive of the classic bus kept longer (or
   * indefinitely) adds a warning (`outbox-relay:inbox-retention-archive`).
   * @default 30 (the monitor's default)
   */
  readonly inboxRetentionDays?: number;
  /** The rule target's dead-letter queue. @default a new queue, SSE-SQS encrypted, TLS only, 14 days */
  readonly existingDeadLetterQueue?: sqs.IQueue;
  /** The function's on-failure destination. @default a new queue, SSE-SQS encrypted, TLS only, 14 days */
  readonly existingFailedEventsQueue?: sqs.IQueue;
  /** Topic the alarms notify. @default no action: the alarms still change state */
  readonly alarmTopic?: sns.ITopic;
  /**
   * The function's errors alarm fires above this many failed invocations in 5 minutes, not counting
   * `order: 'wait-for-gap'`'s designed retries: an invocation that fails with `InboxGapError` so
   * that Lambda retries it emits `InboxGapRetry`, which the alarm subtracts from `Errors`. A gap
   * that outlasts every retry lands in the failure queue, whose alarm fires.
   * @default 0
   */
  readonly errorsAlarmThreshold?: number;
  /**
   * The `consumerLag` alarm fires when the p99 of `ConsumerLag` (seconds from the outbox's commit
   * to the inbox's commit, one value per applied event, emitted by the inbox) is over this in 5
   * minutes. A positive number of seconds.
   * @default 300
   */
  readonly consumerLagAlarmSeconds?: number;
  /**
   * The heartbeat (docs/observe.md#the-heartbeat): the rule (or subscriber) also matches the
   * relay monitor's `OutboxHeartbeat` events from `outbox.heartbeat`, which the inbox acknowledges
   * without calling the handler (counting `HeartbeatReceived`), and the `heartbeat` alarm fires
   * when none arrived for 3 heartbeat intervals (missing data breaching). `false`: neither.
   * @default on, at the interval of the app's `OutboxRelay` on the same bus (off when that relay
   *   sends none); 5 minutes when no relay of the app publishes to the bus
   */
  readonly heartbeat?: boolean;
  /** Namespace of the inbox's metrics (the inbox's `metrics.namespace`). @default 'Outbox' */
  readonly metricNamespace?: string;
  /**
   * A dashboard to add the consumer's {@link OutboxConsumer.widgets} to, as one row, e.g. the
   * relay's (`relay.dashboard`). @default none: add `widgets` to a dashboard yourself
   */
  readonly dashboard?: cloudwatch.Dashboard;
}
