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
 */

import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { Duration, Names, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import * as eventsv2 from 'aws-cdk-lib/aws-eventsv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import * as eventSources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { OutboxConfigError } from '../shared/platform/errors.ts';
import {
  DEFAULT_METRIC_NAMESPACE,
  DEFAULT_ROLES,
  EnvVar,
  INBOX_METRIC_DIMENSION,
  InboxMetricName,
} from '../shared/platform/names.ts';
import { OUTBOX_BUNDLING } from './bundling.ts';
import { EVENTSV2_NAMESPACE } from './custom-event-bus.ts';
import {
  type OutboxDatabaseTarget,
  outboxDatabaseConnection,
  warnOnClusterAuth,
  warnOnProxyAuth,
} from './database.ts';

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

/** The subscriber's filter: the consumer's sources and detail types, evaluated on the event's data. */
function subscriberFilterPattern(sources: string[], types: string[]): string {
  return JSON.stringify({ source: sources, 'detail-type': types });
}

/**
 * Default of `deliveryMaxEventAge` on a Custom Event Bus, seconds: how long the subscriber retries
 * an event whose handler fails before it goes to the dead-letter queue. The subscriber's own
 * default (300 s) would dead-letter events through a database failover or a bad deploy; an hour
 * rides those out, and a poison event holds up only its own aggregate meanwhile (FIFO per group).
 */
export const CUSTOM_BUS_DEFAULT_MAX_EVENT_AGE_SECONDS = 3_600;

/** The inbox's largest `maxEventAgeSeconds` (shared/consumer/inbox.ts), seconds. */
const INBOX_MAX_EVENT_AGE_SECONDS = 21_600;

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
   * record carries no payload). Refused with it: `topology: 'queue'` (a standard queue would lose
   * the order), `retryAttempts` and `maxEventAge` (Lambda's asynchronous retries, unused),
   * `existingFailedEventsQueue`, a function timeout over 30 s, `deliveryMaxEventAge` over 6 hours.
   * (docs/consumer-deploying.md#on-a-custom-event-bus-eventsv2)
   * @default none
   */
  readonly customEventBusArn?: string;
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
  /** The rule target's dead-letter queue. @default a new queue, SSE-SQS encrypted, TLS only, 14 days */
  readonly existingDeadLetterQueue?: sqs.IQueue;
  /** The function's on-failure destination. @default a new queue, SSE-SQS encrypted, TLS only, 14 days */
  readonly existingFailedEventsQueue?: sqs.IQueue;
  /** Topic the alarms notify. @default no action: the alarms still change state */
  readonly alarmTopic?: sns.ITopic;
  /**
   * The function's errors alarm fires above this many errors in 5 minutes. With `order:
   * 'wait-for-gap'` each retried `InboxGapError` counts; raise it if gaps are routine.
   * @default 0
   */
  readonly errorsAlarmThreshold?: number;
  /** Namespace of the inbox's metrics (the inbox's `metrics.namespace`). @default 'Outbox' */
  readonly metricNamespace?: string;
  /**
   * A dashboard to add the consumer's {@link OutboxConsumer.widgets} to, as one row, e.g. the
   * relay's (`relay.dashboard`). @default none: add `widgets` to a dashboard yourself
   */
  readonly dashboard?: cloudwatch.Dashboard;
}

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
  /** The function's Errors metric. */
  readonly errors: cloudwatch.Alarm;
  /** The inbox parked events (`onGapTimeout: 'park'`), emitted by the function itself. */
  readonly parked: cloudwatch.Alarm;
  /**
   * Queue topology: the queue's oldest message is over an hour old (the function is not keeping
   * up, or not reading at all); undefined in the direct topology.
   */
  readonly queueAge: cloudwatch.Alarm | undefined;
}

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
    this.inboxSettings = customBusArn
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
    if (props.proxy) warnOnProxyAuth(this, props.proxy);
    if (props.cluster) warnOnClusterAuth(this, props.cluster);
    this.environment = {
      ...database.environment(this.databaseUser),
      [EnvVar.pgDatabase]: props.databaseName,
      // `outbox inbox parked replay --function-name` checks it before invoking the function.
      [EnvVar.inboxConsumer]: props.consumer,
      [EnvVar.inboxRetryWindowSeconds]: String(this.inboxSettings.retryWindowSeconds),
      [EnvVar.inboxMaxEventAgeSeconds]: String(this.inboxSettings.maxEventAgeSeconds),
    };

    this.deadLetterQueue = props.existingDeadLetterQueue ?? this.endOfLineQueue('DeadLetterQueue');
    this.failedEventsQueue = customBusArn
      ? this.deadLetterQueue
      : (props.existingFailedEventsQueue ?? this.endOfLineQueue('FailedEventsQueue'));

    this.function = props.entry
      ? this.bundledFunction(props, props.entry)
      : (props.existingFunction as lambda.IFunction);
    if (!props.entry && this.function instanceof lambda.Function) {
      for (const [name, value] of Object.entries(this.environment)) this.function.addEnvironment(name, value);
    }
    database.grantConnect(this.function, this.databaseUser);
    if (customBusArn) {
      // Invoked synchronously by the subscriber: Lambda's asynchronous retries do not apply.
      this.queue = undefined;
      this.classicRule = undefined;
      const { subscriber, role } = this.createSubscriber(
        props,
        customBusArn,
        sources,
        types,
        customMaxEventAge,
      );
      this.subscriber = subscriber;
      this.subscriberRole = role;
      this.alarms = this.createAlarms(props);
      this.widgets = this.createWidgets(props);
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
      eventPattern: { source: sources, detailType: types },
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
    this.alarms = this.createAlarms(props);
    this.widgets = this.createWidgets(props);
    props.dashboard?.addWidgets(...this.widgets);
  }

  /**
   * The FIFO subscriber on the Custom Event Bus and the role it assumes. The filter is a `DATA`
   * filter: for PutEvents the data is the EventBridge envelope (`source`, `detail-type`, `detail`),
   * and a `METADATA` filter never matches a PutEvents event ("Filtering events for a subscriber").
   * One event per invocation (`MaxBatchSize` 1: the function then receives the event as one JSON
   * object, as from a rule; any other size delivers an array), `REQUEST_RESPONSE` so a handler
   * error is a failed delivery and the group waits for it ("Lambda function target": for ordered
   * processing on a FIFO subscriber). The role trusts `events.amazonaws.com` and may invoke this
   * function and send to the dead-letter queue ("Permissions by scenario", delivery role).
   */
  private createSubscriber(
    props: OutboxConsumerProps,
    busArn: string,
    sources: string[],
    types: string[],
    maxEventAgeSeconds: number,
  ): { subscriber: eventsv2.CfnSubscriber; role: iam.Role } {
    const role = new iam.Role(this, 'SubscriberRole', {
      assumedBy: new iam.ServicePrincipal('events.amazonaws.com'),
      description: `Custom Event Bus subscriber of the inbox consumer ${props.consumer}: invoke its function, record failures`,
    });
    // The function itself, unqualified: the subscriber names no version or alias.
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({ actions: ['lambda:InvokeFunction'], resources: [this.function.functionArn] }),
    );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [this.deadLetterQueue.queueArn] }),
    );
    this.deadLetterQueue.encryptionMasterKey?.grant(role, 'kms:GenerateDataKey*', 'kms:Decrypt');
    const subscriber = new eventsv2.CfnSubscriber(this, 'Subscriber', {
      name: Names.uniqueResourceName(this, { maxLength: 64, separator: '-' }),
      description:
        `${types.join(', ')} from ${sources.join(', ')} to the inbox consumer ${props.consumer}`.slice(
          0,
          512,
        ),
      eventBusArn: busArn,
      type: 'FIFO',
      filterConfiguration: {
        filters: [{ scope: 'DATA', pattern: subscriberFilterPattern(sources, types) }],
      },
      invokeConfiguration: {
        targetArn: this.function.functionArn,
        roleArn: role.roleArn,
        lambdaParameters: {
          invocationType: 'REQUEST_RESPONSE',
          invocationTimeoutSeconds: String(CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS),
        },
      },
      batchConfiguration: { maxBatchSize: 1 },
      retryPolicy: {
        maxRetryAttempts: props.deliveryRetryAttempts ?? 185,
        maxEventAgeInSeconds: maxEventAgeSeconds,
      },
      onFailureConfiguration: { arn: this.deadLetterQueue.queueArn },
    });
    // The role's policy first: a delivery before it exists would be denied and retried.
    const policy = role.node.tryFindChild('DefaultPolicy');
    if (policy) subscriber.node.addDependency(policy);
    return { subscriber, role };
  }

  /** A queue that is the end of the line: encrypted, TLS only, kept 14 days (SQS's longest). */
  private endOfLineQueue(id: string): sqs.Queue {
    const queue = new sqs.Queue(this, id, {
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

  /** The function bundled from `entry`: Node 24, Arm, in the VPC, its own log group. */
  private bundledFunction(props: OutboxConsumerProps, entry: string): nodejs.NodejsFunction {
    const bundling = { ...OUTBOX_BUNDLING, ...props.functionProps?.bundling };
    if (!bundling.forceDockerBundling && !bundling.dockerImage) requireLocalEsbuild();
    const fn = new nodejs.NodejsFunction(this, 'Function', {
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: 256,
      timeout: Duration.seconds(30),
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets,
      securityGroups: props.securityGroups,
      logGroup: new logs.LogGroup(this, 'FunctionLogs', {
        retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      }),
      description: `Inbox consumer ${props.consumer}`,
      ...props.functionProps,
      entry,
      bundling,
      environment: { ...this.environment, ...props.functionProps?.environment },
    });
    // cdk-nag (AwsSolutions), acknowledged with reasons rather than silenced.
    for (const policy of ['AWSLambdaBasicExecutionRole', 'AWSLambdaVPCAccessExecutionRole']) {
      if (!fn.role) break;
      Validations.of(fn.role).acknowledge({
        id: `AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/${policy}]`,
        reason: `${policy} is the AWS-maintained minimum for a VPC Lambda: its own log group and its network interfaces`,
      });
    }
    return fn;
  }

  /** The inbox's parked events, as the function emits them: the metric of the `parked` alarm. */
  private parkedMetric(props: OutboxConsumerProps): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: props.metricNamespace ?? DEFAULT_METRIC_NAMESPACE,
      metricName: InboxMetricName.Parked,
      dimensionsMap: { [INBOX_METRIC_DIMENSION]: props.consumer },
      statistic: 'Sum',
      period: Duration.minutes(5),
    });
  }

  /** See {@link OutboxConsumer.widgets}. */
  private createWidgets(props: OutboxConsumerProps): cloudwatch.IWidget[] {
    const name = props.consumer;
    const period = Duration.minutes(5);
    const visible = (q: sqs.IQueue, label: string) =>
      q.metricApproximateNumberOfMessagesVisible({ period, statistic: 'Maximum', label });
    // One row of 24 units: three widgets 8 wide, or four 6 wide with the queue's.
    const size = { width: this.queue ? 6 : 8, height: 6 };
    const widgets: cloudwatch.IWidget[] = [
      new cloudwatch.GraphWidget({
        ...size,
        title: `${name}: failure queues (messages)`,
        left:
          this.failedEventsQueue === this.deadLetterQueue
            ? [visible(this.deadLetterQueue, 'undelivered or failed (dead-letter queue)')]
            : [
                visible(this.deadLetterQueue, 'undelivered (dead-letter queue)'),
                visible(this.failedEventsQueue, 'failed (failed-events queue)'),
              ],
      }),
      new cloudwatch.GraphWidget({
        ...size,
        title: `${name}: invocations and errors (count)`,
        left: [
          this.function.metricInvocations({ period, statistic: 'Sum' }),
          this.function.metricErrors({ period, statistic: 'Sum' }),
        ],
      }),
      new cloudwatch.GraphWidget({
        ...size,
        title: `${name}: duration (ms), parked events`,
        left: [
          this.function.metricDuration({ period, statistic: 'p50', label: 'duration p50' }),
          this.function.metricDuration({ period, statistic: 'p99', label: 'duration p99' }),
        ],
        right: [this.parkedMetric(props).with({ label: 'parked events' })],
      }),
    ];
    if (this.queue) {
      widgets.push(
        new cloudwatch.GraphWidget({
          ...size,
          title: `${name}: queue (messages, age in s)`,
          left: [visible(this.queue, 'visible messages')],
          right: [
            this.queue.metricApproximateAgeOfOldestMessage({
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

  private createAlarms(props: OutboxConsumerProps): OutboxConsumerAlarms {
    const alarm = (name: string, metric: cloudwatch.IMetric, description: string, threshold = 0) => {
      const created = new cloudwatch.Alarm(this, name, {
        alarmDescription: description,
        metric,
        threshold,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
      if (props.alarmTopic) created.addAlarmAction(new cwActions.SnsAction(props.alarmTopic));
      return created;
    };
    const visible = (q: sqs.IQueue) =>
      q.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(5), statistic: 'Maximum' });
    const name = props.consumer;
    if (this.subscriber) {
      const subscriberMetric = (metricName: string) =>
        new cloudwatch.Metric({
          namespace: EVENTSV2_NAMESPACE,
          metricName,
          dimensionsMap: {
            EventBus: props.customEventBusArn as string,
            Subscriber: (this.subscriber as eventsv2.CfnSubscriber).attrSubscriberArn,
          },
          statistic: 'Sum',
          period: Duration.minutes(5),
        });
      const fromBus =
        'the record carries no payload (the event is published in the outbox, not a dead letter): replay it from the bus with a subscriber at StartingPosition POINT_IN_TIME before it and Transformer WITH_METADATA; the inbox applies what it has not applied and skips the rest as duplicates.';
      return {
        undelivered: alarm(
          'UndeliveredAlarm',
          visible(this.deadLetterQueue),
          `The ${name} consumer's Custom Event Bus subscriber could not deliver events, or its handler failed on every attempt, after its retries (the dead-letter queue holds their records; ${fromBus}) Fix the cause, then replay.`,
        ),
        failed: alarm(
          'FailedEventsAlarm',
          subscriberMetric('EventsDropped'),
          `The ${name} consumer's Custom Event Bus subscriber dropped events (its dead-letter queue refused them): ${fromBus}`,
        ),
        errors: alarm(
          'ErrorsAlarm',
          this.function.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
          `The ${name} consumer's function failed invocations (the subscriber retries them, holding up their aggregate; those that fail every attempt are dead-lettered).`,
          props.errorsAlarmThreshold ?? 0,
        ),
        parked: alarm(
          'ParkedAlarm',
          this.parkedMetric(props),
          `The ${name} inbox parked events: an earlier one of the same chain was still missing after the gap wait. Run: outbox inbox parked list --consumer ${name}; then replay or discard each.`,
        ),
        queueAge: undefined,
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
        this.failedEventsQueue.queueUrl,
        this.deadLetterQueue.queueUrl,
        this.function.functionName,
        fits,
      );
    };
    return {
      undelivered: alarm(
        'UndeliveredAlarm',
        visible(this.deadLetterQueue),
        failureText(
          `EventBridge could not deliver events to the ${name} consumer's ${this.queue ? 'queue' : 'function'} (the messages are the events, the error in their attributes). Fix the cause, then`,
        ),
      ),
      failed: alarm(
        'FailedEventsAlarm',
        visible(this.failedEventsQueue),
        failureText(
          `The ${name} consumer's handler failed on every ${this.topology === 'direct' ? 'attempt' : 'receive'} for some events (${this.topology === 'direct' ? "each message is Lambda's record: the event and the error" : "the messages are the events; the errors are in the function's logs and outbox inbox failed list"}). Fix the cause, then`,
        ),
      ),
      errors: alarm(
        'ErrorsAlarm',
        this.function.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
        `The ${name} consumer's function failed invocations (Lambda retries them; those that fail every attempt land in the failed-events queue).`,
        props.errorsAlarmThreshold ?? 0,
      ),
      // Emitted by the inbox in the function itself (an EMF line per parked event).
      parked: alarm(
        'ParkedAlarm',
        this.parkedMetric(props),
        `The ${name} inbox parked events: an earlier one of the same chain was still missing after the gap wait. Run: outbox inbox parked list --consumer ${name}; then replay or discard each.`,
      ),
      queueAge: this.queue
        ? alarm(
            'QueueAgeAlarm',
            this.queue.metricApproximateAgeOfOldestMessage({
              period: Duration.minutes(5),
              statistic: 'Maximum',
            }),
            `The ${name} consumer's queue holds a message over an hour old: the function is not keeping up or not reading (its event source mapping disabled, failing invocations). Messages expire after 7 days.`,
            3_600,
          )
        : undefined,
    };
  }
}

/**
 * Checks the props before anything is created.
 * @returns the rule's distinct sources and types, in the order given
 * @throws {OutboxConfigError} whose `variable` names the prop, e.g. `events[1].source`
 */
export function validateConsumerProps(props: OutboxConsumerProps): { sources: string[]; types: string[] } {
  const fail = (field: string, message: string): never => {
    throw new OutboxConfigError(field, `OutboxConsumer ${JSON.stringify(props.consumer ?? '')}: ${message}`);
  };
  const role = `${DEFAULT_ROLES.consumer}_${props.consumer}`;
  if (
    typeof props.consumer !== 'string' ||
    props.consumer.trim() === '' ||
    props.consumer.includes(',') ||
    Buffer.byteLength(role) > 63
  ) {
    fail(
      'consumer',
      `expected a non-empty name without a comma whose role (${role}) is at most 63 bytes (Postgres's limit)`,
    );
  }
  if (!Array.isArray(props.events) || props.events.length === 0) {
    fail('events', 'expected at least one event definition (from defineEvent) to subscribe to');
  }
  props.events.forEach((event, i) => {
    if (typeof event?.type !== 'string' || event.type.trim() === '' || event.type.length > 128) {
      fail(`events[${i}].type`, 'expected a DetailType: a non-empty string of at most 128 characters');
    }
    if (typeof event.source !== 'string' || event.source.trim() === '') {
      fail(
        `events[${i}].source`,
        `event ${event.type} has no source: give defineEvent a source, since the rule matches on it`,
      );
    }
  });
  if ((props.entry === undefined) === (props.existingFunction === undefined)) {
    fail('entry', 'expected exactly one of entry (a handler file to bundle) and existingFunction');
  }
  if (props.functionProps && !props.entry) fail('functionProps', 'applies only with entry');
  if ((props.eventBus === undefined) === (props.customEventBusArn === undefined)) {
    fail(
      'eventBus',
      'expected exactly one of eventBus (a classic bus: relay.eventBus) and customEventBusArn (a Custom Event Bus: relay.customEventBusArn)',
    );
  }
  if (props.customEventBusArn !== undefined) validateCustomBusConsumer(props, fail);
  const topology = props.topology ?? 'direct';
  if (topology !== 'direct' && topology !== 'queue')
    fail('topology', `expected direct or queue, got ${topology}`);
  const onlyFor = (field: keyof OutboxConsumerProps, only: 'direct' | 'queue') => {
    if (props[field] !== undefined && topology !== only) fail(field, `applies only to the ${only} topology`);
  };
  for (const field of ['retryAttempts', 'maxEventAge'] as const) onlyFor(field, 'direct');
  for (const field of ['visibilityTimeout', 'maxReceiveCount', 'batchSize', 'maxConcurrency'] as const)
    onlyFor(field, 'queue');
  const whole = (field: keyof OutboxConsumerProps, value: unknown, min: number, max: number) => {
    if (
      value !== undefined &&
      (!Number.isInteger(value) || (value as number) < min || (value as number) > max)
    ) {
      fail(field, `expected a whole number from ${min} to ${max}, got ${String(value)}`);
    }
  };
  whole('maxReceiveCount', props.maxReceiveCount, 1, 50);
  whole('batchSize', props.batchSize, 1, 10);
  whole('maxConcurrency', props.maxConcurrency, 2, 1000);
  if (topology === 'queue') queueVisibilityTimeout(props);
  const retryAttempts = props.retryAttempts ?? 2;
  if (![0, 1, 2].includes(retryAttempts)) fail('retryAttempts', `expected 0, 1 or 2, got ${retryAttempts}`);
  const window = RETRY_WINDOW_SECONDS_BY_ATTEMPTS[retryAttempts];
  const age = (props.maxEventAge ?? Duration.hours(6)).toSeconds();
  if (age < 60 || age > 21_600 || age < window) {
    fail('maxEventAge', `expected 60 s to 6 h and at least the retry window (${window} s), got ${age} s`);
  }
  const deliveryRetries = props.deliveryRetryAttempts ?? 185;
  if (!Number.isInteger(deliveryRetries) || deliveryRetries < 0 || deliveryRetries > 185) {
    fail('deliveryRetryAttempts', `expected a whole number from 0 to 185, got ${deliveryRetries}`);
  }
  const deliveryAge = (props.deliveryMaxEventAge ?? Duration.hours(24)).toSeconds();
  if (deliveryAge < 60 || deliveryAge > 86_400) {
    fail('deliveryMaxEventAge', `expected 60 s to 24 h, got ${deliveryAge} s`);
  }
  const distinct = (values: string[]) => [...new Set(values)];
  return {
    sources: distinct(props.events.map((e) => e.source as string)),
    types: distinct(props.events.map((e) => e.type)),
  };
}

/**
 * The combinations a Custom Event Bus subscriber refuses.
 * - `topology: 'queue'`: the FIFO subscriber would hand each event to a standard queue, which
 *   accepts at once, and the event source mapping reads batches concurrently: the order is lost
 *   at the queue (an SQS FIFO queue would keep it, but the queue topology's handler and failure
 *   handling are built for a standard queue).
 * - `retryAttempts`, `maxEventAge`, `existingFailedEventsQueue`: Lambda's asynchronous retries and
 *   on-failure destination, which a synchronous invocation does not use; the subscriber's retries
 *   are `deliveryRetryAttempts` and `deliveryMaxEventAge`.
 * - a function timeout over {@link CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS}: the subscriber would give
 *   up on a slow invocation and send the event again while it still runs.
 * - `deliveryMaxEventAge` over 6 h: it is the inbox's `maxEventAgeSeconds`, at most 21,600.
 * - `events` whose filter pattern is over {@link CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH} characters.
 */
function validateCustomBusConsumer(
  props: OutboxConsumerProps,
  fail: (field: string, message: string) => never,
): void {
  if ((props.topology ?? 'direct') !== 'direct') {
    fail(
      'topology',
      "a Custom Event Bus subscriber delivers each aggregate's events in order to the function itself; through the queue topology's standard queue that order would be lost: use the direct topology",
    );
  }
  for (const field of ['retryAttempts', 'maxEventAge', 'existingFailedEventsQueue'] as const) {
    if (props[field] !== undefined) {
      fail(
        field,
        'does not apply on a Custom Event Bus: the subscriber invokes the function synchronously and retries it itself (deliveryRetryAttempts, deliveryMaxEventAge), then records the event in deadLetterQueue',
      );
    }
  }
  const timeout = props.entry
    ? (props.functionProps?.timeout ?? Duration.seconds(30)).toSeconds()
    : props.existingFunction instanceof lambda.Function
      ? (props.existingFunction.timeout ?? Duration.seconds(3)).toSeconds()
      : undefined;
  if (timeout !== undefined && timeout > CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS) {
    fail(
      props.entry ? 'functionProps.timeout' : 'existingFunction',
      `the function's timeout is ${timeout} s: a Custom Event Bus subscriber waits at most ${CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS} s for an invocation and would send the event again while it still runs`,
    );
  }
  const distinct = (values: string[]) => [...new Set(values)];
  const pattern = subscriberFilterPattern(
    distinct(props.events.map((e) => e.source as string)),
    distinct(props.events.map((e) => e.type)),
  );
  if (pattern.length > CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH) {
    fail(
      'events',
      `the subscriber's filter pattern for these ${props.events.length} events is ${pattern.length} characters, over the ${CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH} a Custom Event Bus filter takes: split the events over several consumers`,
    );
  }
  const age = props.deliveryMaxEventAge?.toSeconds();
  if (age !== undefined && age > INBOX_MAX_EVENT_AGE_SECONDS) {
    fail(
      'deliveryMaxEventAge',
      `on a Custom Event Bus it is the inbox's maxEventAgeSeconds, at most ${INBOX_MAX_EVENT_AGE_SECONDS} s; got ${age} s`,
    );
  }
}

/**
 * NodejsFunction bundles locally only when it finds esbuild — resolvable from aws-cdk-lib, or
 * `esbuild` on the PATH — and otherwise silently builds in Docker. esbuild is an optional peer of
 * the package (an app with only OutboxRelay, whose bundles are pre-built, need not install its
 * 10 MB): where it is not found, synth fails with the remedy rather than need Docker.
 * @throws Error naming the remedy when esbuild cannot be found
 */
function requireLocalEsbuild(): void {
  try {
    const fromCdk = createRequire(createRequire(import.meta.url).resolve('aws-cdk-lib/package.json'));
    fromCdk.resolve('esbuild/package.json');
    return;
  } catch {
    const probe = spawnSync('esbuild', ['--version']);
    if (probe.status === 0 && !probe.error) return;
  }
  throw new Error(
    'OutboxConsumer: esbuild cannot be found beside aws-cdk-lib or on the PATH, so NodejsFunction would bundle the entry in Docker. Install it in the CDK app (npm i -D esbuild), or pass functionProps.bundling.forceDockerBundling: true to use Docker on purpose.',
  );
}

/**
 * The queue topology's visibility timeout: the given one, or six times the function's timeout
 * capped at {@link MAX_QUEUE_VISIBILITY_SECONDS}. The event source mapping needs at least the
 * function's timeout, or a message would be received again while its first invocation still runs.
 * @throws {OutboxConfigError} (`visibilityTimeout`) when it is under the function's timeout or over the cap,
 *   or (`existingFunction`) when a function not made by CDK leaves it unknown and none was given
 */
function queueVisibilityTimeout(props: OutboxConsumerProps): Duration {
  const fail = (field: string, message: string): never => {
    throw new OutboxConfigError(field, `OutboxConsumer ${JSON.stringify(props.consumer)}: ${message}`);
  };
  const functionTimeout = props.entry
    ? (props.functionProps?.timeout ?? Duration.seconds(30)).toSeconds()
    : props.existingFunction instanceof lambda.Function
      ? (props.existingFunction.timeout ?? Duration.seconds(3)).toSeconds()
      : undefined;
  if (props.visibilityTimeout === undefined && functionTimeout === undefined) {
    fail('existingFunction', "the function's timeout is unknown: give visibilityTimeout");
  }
  const seconds =
    props.visibilityTimeout?.toSeconds() ??
    Math.min(6 * (functionTimeout as number), MAX_QUEUE_VISIBILITY_SECONDS);
  if (
    seconds > MAX_QUEUE_VISIBILITY_SECONDS ||
    (functionTimeout !== undefined && seconds < functionTimeout)
  ) {
    fail(
      'visibilityTimeout',
      `${seconds} s: expected at least the function's timeout (${functionTimeout ?? '?'} s) and at most ${MAX_QUEUE_VISIBILITY_SECONDS} s (a retry must come before the monitor counts the event as failed)`,
    );
  }
  return Duration.seconds(seconds);
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
