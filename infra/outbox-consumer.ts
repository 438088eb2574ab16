/**
 * `OutboxConsumer`: an inbox consumer of the outbox's bus, deployed and watched like the relay. An
 * EventBridge rule matching the consumer's typed events, a Lambda function (bundled from your entry
 * file, or one of your own) with Lambda's retries and an on-failure destination, a dead-letter
 * queue for what EventBridge could not deliver, least-privilege IAM (its own database role), and
 * alarms. Shaped after aws-solutions-constructs' eventbridge-lambda pattern: each part is either
 * built from props or passed in, the resources are exposed, the props are checked at synth.
 *
 * Two topologies: `direct` (default), rule → Lambda (asynchronous invocation, one event per
 * invocation, Lambda's retries and an on-failure destination); `queue`, rule → SQS queue (with a
 * dead-letter queue after `maxReceiveCount` receives) → Lambda event source mapping with partial
 * batch responses, whose handler wraps the inbox in `sqsBatch` (shared/consumer/sqs-batch.ts).
 *
 * Split by concern, as OutboxRelay is: this module builds the topologies (rule or subscriber,
 * queues, function wiring); the props and their limits are in consumer-props.ts, their checks in
 * consumer-validation.ts, the bundled function in consumer-function.ts, the Custom Event Bus
 * subscriber in consumer-subscriber.ts, the alarms and widgets in consumer-observability.ts.
 */
import { Duration, Validations } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import type * as eventsv2 from 'aws-cdk-lib/aws-eventsv2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import * as eventSources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { OutboxConfigError } from '../shared/platform/errors.ts';
import { DEFAULT_ROLES, EnvVar, HEARTBEAT_EVENT } from '../shared/platform/names.ts';
import { bundledFunction } from './consumer-function.ts';
import {
  consumerHeartbeatMinutes,
  createConsumerAlarms,
  createConsumerWidgets,
  type OutboxConsumerAlarms,
  relayOfConsumer,
  warnOnUnwatchedInbox,
} from './consumer-observability.ts';
import {
  CUSTOM_BUS_DEFAULT_MAX_EVENT_AGE_SECONDS,
  type OutboxConsumerInboxSettings,
  type OutboxConsumerProps,
  RETRY_WINDOW_SECONDS_BY_ATTEMPTS,
} from './consumer-props.ts';
import { createSubscriber } from './consumer-subscriber.ts';
import { queueVisibilityTimeout, validateConsumerProps } from './consumer-validation.ts';
import { outboxDatabaseConnection, warnOnClusterAuth, warnOnProxyAuth } from './database.ts';
import { OutboxRelay } from './outbox-relay.ts';
import { checkMonitorKeepsInbox, warnOnConsumerArchives } from './retention.ts';

/** A rule on the outbox's bus, the consumer's function, its two failure queues and their alarms. */
export class OutboxConsumer extends Construct {
  /** The Custom Event Bus's FIFO subscriber; undefined on a classic bus. */
  public readonly subscriber: eventsv2.CfnSubscriber | undefined;
  /** The role the subscriber assumes to invoke the function and record failures; undefined on a classic bus. */
  public readonly subscriberRole: iam.Role | undefined;
  private readonly classicRule: events.Rule | undefined;
  /**
   * The rule on the classic bus.
   * @throws {OutboxConfigError} (`rule`) on a Custom Event Bus, which has a {@link subscriber} instead
   */
  public get rule(): events.Rule {
    if (!this.classicRule) {
      throw new OutboxConfigError(
        'rule',
        'this OutboxConsumer subscribes to a Custom Event Bus: it has a subscriber, not a rule',
      );
    }
    return this.classicRule;
  }
  /** The function: a NodejsFunction built from `entry`, or `existingFunction`. */
  public readonly function: lambda.IFunction;
  /**
   * Events EventBridge could not deliver into Lambda, after the target's retries. On a Custom
   * Event Bus: the subscriber's dead-letter records (no payload) of events not delivered or whose
   * handler failed every attempt.
   */
  public readonly deadLetterQueue: sqs.IQueue;
  /**
   * Direct: invocation records (event, error) of events whose handler failed every attempt. Queue:
   * the queue's dead-letter queue (the events themselves). Custom Event Bus: `deadLetterQueue`
   * itself (the subscriber has one failure destination).
   */
  public readonly failedEventsQueue: sqs.IQueue;
  /** Queue topology: the queue between the rule and the function; undefined in the direct topology. */
  public readonly queue: sqs.Queue | undefined;
  public readonly topology: 'direct' | 'queue';
  /**
   * The relay monitor's heartbeat interval the consumer receives and alarms on, minutes
   * ({@link OutboxConsumerProps.heartbeat}); undefined without the heartbeat.
   */
  public readonly heartbeatMinutes: number | undefined;
  public readonly alarms: OutboxConsumerAlarms;
  /** The database user the function logs in as. */
  public readonly databaseUser: string;
  /**
   * The inbox settings that follow from the delivery, also given to the function as
   * `OUTBOX_INBOX_RETRY_WINDOW_SECONDS` and `OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS`, which the inbox
   * reads as its defaults: the handler need not state them.
   */
  public readonly inboxSettings: OutboxConsumerInboxSettings;
  /** The environment the function needs: database login, consumer name, inbox settings. */
  public readonly environment: Readonly<Record<string, string>>;
  /**
   * The consumer's dashboard widgets: graphs 6 high filling one row of 24 units (three 8 wide in
   * the direct topology, four 6 wide in the queue one), every metric per 5 minutes:
   * - `<consumer>: failure queues (messages)`: ApproximateNumberOfMessagesVisible (Maximum, a
   *   count) of `deadLetterQueue` (undelivered) and `failedEventsQueue` (failed), the queues the
   *   `undelivered` and `failed` alarms watch;
   * - `<consumer>: invocations and errors (count)`: the function's Invocations and Errors (Sum);
   * - `<consumer>: duration (ms), parked events`: the function's Duration in milliseconds, p50 and
   *   p99 (left axis), and the inbox's InboxParked (Sum, a count, right axis), the metric the
   *   `parked` alarm watches;
   * - queue topology only, `<consumer>: queue (messages, age in s)`: the queue's
   *   ApproximateNumberOfMessagesVisible (Maximum, left axis) and ApproximateAgeOfOldestMessage
   *   (Maximum, seconds, right axis; the `queueAge` alarm's metric).
   *
   * Added to `dashboard` as one row when one is given; otherwise add them to a dashboard of yours.
   */
  public readonly widgets: readonly cloudwatch.IWidget[];

  /** @throws {OutboxConfigError} naming the prop (`events[0].source`, `retryAttempts`…) that is wrong */
  constructor(scope: Construct, id: string, props: OutboxConsumerProps) {
    super(scope, id);
    const { sources, types } = validateConsumerProps(props);
    this.topology = props.topology ?? 'direct';
    const retryAttempts = props.retryAttempts ?? 2;
    const maxEventAge = props.maxEventAge ?? Duration.hours(6);
    const visibilityTimeout = this.topology === 'queue' ? queueVisibilityTimeout(props) : Duration.seconds(0);
    const maxReceiveCount = props.maxReceiveCount ?? 5;
    const customBusArn = props.customEventBusArn;
    const customMaxEventAge = (
      props.deliveryMaxEventAge ?? Duration.seconds(CUSTOM_BUS_DEFAULT_MAX_EVENT_AGE_SECONDS)
    ).toSeconds();
    this.inboxSettings =
      customBusArn && this.topology === 'direct'
        ? // The subscriber waits for each invocation and retries a failed one until the event's age.
          { retryWindowSeconds: customMaxEventAge, maxEventAgeSeconds: customMaxEventAge }
        : this.topology === 'direct'
          ? {
              retryWindowSeconds: RETRY_WINDOW_SECONDS_BY_ATTEMPTS[retryAttempts],
              maxEventAgeSeconds: maxEventAge.toSeconds(),
            }
          : {
              retryWindowSeconds: (maxReceiveCount - 1) * visibilityTimeout.toSeconds(),
              maxEventAgeSeconds: 21_600,
            };
    this.databaseUser = props.databaseUser ?? `${DEFAULT_ROLES.consumer}_${props.consumer}`;
    const database = outboxDatabaseConnection(props);
    const relays = this.node.root.node.findAll().filter((c): c is OutboxRelay => c instanceof OutboxRelay);
    warnOnUnwatchedInbox(this, props, database.host, relays);
    this.heartbeatMinutes = consumerHeartbeatMinutes(props, relayOfConsumer(props, relays));
    // The heartbeat's Source and DetailType join the pattern's lists: each list matches one field,
    // so a business source with the heartbeat's type would match too, which no producer sends
    // (the inbox takes a heartbeat only with both).
    const matched = this.heartbeatMinutes
      ? { sources: [...sources, HEARTBEAT_EVENT.source], types: [...types, HEARTBEAT_EVENT.detailType] }
      : { sources, types };
    const inboxRetentionDays = props.inboxRetentionDays ?? 30;
    if (!Number.isInteger(inboxRetentionDays) || inboxRetentionDays < 2 || inboxRetentionDays > 3_650) {
      throw new OutboxConfigError(
        'inboxRetentionDays',
        `OutboxConsumer ${JSON.stringify(props.consumer)}: expected whole days from 2 to 3650, got ${String(inboxRetentionDays)}`,
      );
    }
    // A bus replay older than the inbox's records finds them pruned: the inbox answers such events
    // `stale` (beyond-retention), so a bus kept longer promises replays that apply nothing (issue 45).
    const busRelay = customBusArn
      ? this.node.root.node
          .findAll()
          .find((c): c is OutboxRelay => c instanceof OutboxRelay && c.customEventBusArn === customBusArn)
      : undefined;
    const busDays = busRelay?.customEventBusRetentionDays;
    if (busDays !== undefined && busDays > inboxRetentionDays) {
      throw new OutboxConfigError(
        'customEventBus.retentionDays',
        `OutboxConsumer ${JSON.stringify(props.consumer)}: the Custom Event Bus keeps events ${busDays} days (customEventBus.retentionDays of ${busRelay?.node.path}), longer than this consumer's inbox keeps its records (inboxRetentionDays ${inboxRetentionDays}): a replay of the older events would find their records pruned, and the inbox would answer them stale without applying them. Raise inboxRetentionDays (and the relay's monitorSettings.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS) or lower the bus's retention`,
      );
    }
    // The monitor of the relay in this inbox's database prunes its records: no sooner than the
    // consumer counts on them (infra/retention.ts).
    checkMonitorKeepsInbox(
      props.consumer,
      inboxRetentionDays,
      { host: database.host, databaseName: props.databaseName },
      relays,
    );
    warnOnConsumerArchives(
      this,
      props.consumer,
      inboxRetentionDays,
      customBusArn ? undefined : props.eventBus,
    );
    if (props.proxy) warnOnProxyAuth(this, props.proxy);
    if (props.cluster) warnOnClusterAuth(this, props.cluster);
    this.environment = {
      ...database.environment(this.databaseUser),
      [EnvVar.pgDatabase]: props.databaseName,
      // `outbox inbox parked replay --function-name` checks it before invoking the function.
      [EnvVar.inboxConsumer]: props.consumer,
      [EnvVar.inboxRetryWindowSeconds]: String(this.inboxSettings.retryWindowSeconds),
      [EnvVar.inboxMaxEventAgeSeconds]: String(this.inboxSettings.maxEventAgeSeconds),
      // A Custom Event Bus FIFO subscriber's failed call holds up every group of the subscriber:
      // the inbox parks a poison event (and holds its aggregate) after a few failed calls instead.
      ...(customBusArn && this.topology === 'direct' && props.parkAfterAttempts !== false
        ? { [EnvVar.inboxParkAfterAttempts]: String(parkAfterAttemptsOf(props.parkAfterAttempts)) }
        : {}),
      [EnvVar.inboxRetentionDays]: String(inboxRetentionDays),
    };

    this.deadLetterQueue = props.existingDeadLetterQueue ?? this.endOfLineQueue('DeadLetterQueue');
    this.failedEventsQueue = customBusArn
      ? this.topology === 'queue'
        ? // An SQS FIFO queue redrives only to a FIFO queue.
          this.endOfLineQueue('FailedEventsQueue', true)
        : this.deadLetterQueue
      : (props.existingFailedEventsQueue ?? this.endOfLineQueue('FailedEventsQueue'));

    this.function = props.entry
      ? bundledFunction(this, props, props.entry, this.environment)
      : (props.existingFunction as lambda.IFunction);
    if (!props.entry && this.function instanceof lambda.Function) {
      for (const [name, value] of Object.entries(this.environment)) this.function.addEnvironment(name, value);
    }
    database.grantConnect(this.function, this.databaseUser);
    if (customBusArn) {
      // Direct: invoked synchronously by the subscriber, Lambda's asynchronous retries do not apply.
      // Queue: the subscriber sends to an SQS FIFO queue (a group per aggregate) that the function
      // reads, so a bursty consumer keeps its buffer beside the FIFO consumers of the same bus.
      this.queue =
        this.topology === 'queue' ? this.fifoQueue(props, visibilityTimeout, maxReceiveCount) : undefined;
      this.classicRule = undefined;
      const { subscriber, role } = createSubscriber(
        this,
        props,
        { function: this.function, deadLetterQueue: this.deadLetterQueue, queue: this.queue },
        customBusArn,
        matched.sources,
        matched.types,
        customMaxEventAge,
      );
      this.subscriber = subscriber;
      this.subscriberRole = role;
      this.alarms = createConsumerAlarms(this, props, this);
      this.widgets = createConsumerWidgets(props, this);
      props.dashboard?.addWidgets(...this.widgets);
      return;
    }
    this.subscriber = undefined;
    this.subscriberRole = undefined;
    if (this.topology === 'direct') {
      // Lambda's own handling of a failed asynchronous invocation: the retries, the event's age,
      // and the on-failure destination (without it Lambda drops the event after the last retry).
      this.function.configureAsyncInvoke({
        retryAttempts,
        maxEventAge,
        onFailure: new destinations.SqsDestination(this.failedEventsQueue),
      });
      this.queue = undefined;
    } else {
      this.queue = new sqs.Queue(this, 'Queue', {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        // Shorter than its dead-letter queue's 14 days, as AWS advises: a message keeps its first
        // enqueue time when it moves there (standard queues). A stalled consumer is alarmed on
        // (queueAge) long before a message would expire.
        retentionPeriod: Duration.days(7),
        visibilityTimeout,
        deadLetterQueue: { queue: this.failedEventsQueue, maxReceiveCount },
      });
      this.function.addEventSource(
        new eventSources.SqsEventSource(this.queue, {
          batchSize: props.batchSize ?? 10,
          reportBatchItemFailures: true,
          maxConcurrency: props.maxConcurrency,
        }),
      );
    }

    this.classicRule = new events.Rule(this, 'Rule', {
      eventBus: props.eventBus,
      eventPattern: { source: matched.sources, detailType: matched.types },
      description: `${types.join(', ')} from ${sources.join(', ')} to the inbox consumer ${props.consumer}`,
    });
    // Delivery into Lambda's queue (direct: EventBridge invokes asynchronously, so this covers
    // only getting the event queued) or into the SQS queue: the target's retries, then the
    // dead-letter queue.
    const delivery = {
      retryAttempts: props.deliveryRetryAttempts ?? 185,
      maxEventAge: props.deliveryMaxEventAge ?? Duration.hours(24),
      deadLetterQueue: this.deadLetterQueue,
    };
    this.classicRule.addTarget(
      this.queue
        ? new eventTargets.SqsQueue(this.queue, delivery)
        : new eventTargets.LambdaFunction(this.function, delivery),
    );
    this.alarms = createConsumerAlarms(this, props, this);
    this.widgets = createConsumerWidgets(props, this);
    props.dashboard?.addWidgets(...this.widgets);
  }

  /**
   * Queue topology on a Custom Event Bus: the SQS FIFO queue the subscriber sends to (deduplicated
   * by the MessageDeduplicationId the subscriber sets), read by the function with partial batch
   * responses; `sqsBatch` reports a failed message's later group members failed too, so each group
   * stays in order.
   */
  private fifoQueue(
    props: OutboxConsumerProps,
    visibilityTimeout: Duration,
    maxReceiveCount: number,
  ): sqs.Queue {
    const queue = new sqs.Queue(this, 'Queue', {
      fifo: true,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(7),
      visibilityTimeout,
      deadLetterQueue: { queue: this.failedEventsQueue, maxReceiveCount },
    });
    this.function.addEventSource(
      new eventSources.SqsEventSource(queue, {
        batchSize: props.batchSize ?? 10,
        reportBatchItemFailures: true,
        maxConcurrency: props.maxConcurrency,
      }),
    );
    return queue;
  }

  /** A queue that is the end of the line: encrypted, TLS only, kept 14 days (SQS's longest). */
  private endOfLineQueue(id: string, fifo = false): sqs.Queue {
    const queue = new sqs.Queue(this, id, {
      ...(fifo ? { fifo: true } : {}),
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(14),
    });
    Validations.of(queue).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SQS3',
      reason:
        'This queue is itself the end of the line: the rule target dead-letter queue or the function on-failure destination, alarmed on and read by an operator',
    });
    return queue;
  }
}

/** The consumer's `parkAfterAttempts`, 3 by default. @throws {OutboxConfigError} unless a whole number from 1 */
function parkAfterAttemptsOf(value: number | undefined): number {
  const n = value ?? 3;
  if (!Number.isInteger(n) || n < 1) {
    throw new OutboxConfigError(
      'parkAfterAttempts',
      `expected a whole number from 1, or false; got ${String(value)}`,
    );
  }
  return n;
}
