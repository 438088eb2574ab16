/**
 * CDK wiring of the example consumer: an EventBridge rule matching `source: demo.shop` and
 * `detail-type: OrderPlaced` on the outbox's bus, with the billing Lambda as its target.
 *
 * Two different failures, two queues, one alarm each, so that nothing is dropped silently (and a
 * third alarm on the events the inbox parked, see consumer.ts):
 * - **Delivery into Lambda** (EventBridge could not invoke the function: throttled Invoke API,
 *   missing permission, function deleted): the rule target's retry policy (24 hours, 185
 *   attempts) and then `deliveryDeadLetterQueue`, which receives the event itself.
 * - **The handler failed** (an error, a timeout, a lost connection, `InboxGapError`): EventBridge
 *   invokes its Lambda targets asynchronously, so it has already succeeded when the handler runs;
 *   the target's retry policy no longer applies. Lambda retries twice (1 and then 2 minutes later,
 *   `retryAttempts: 2`), then sends an invocation record (the event, the error, and
 *   `RetriesExhausted` or `EventAgeExceeded`) to the function's on-failure destination,
 *   `failedEventsQueue`. Without that destination Lambda would drop the event.
 *
 * Why an on-failure destination rather than an SQS queue between the rule and the function: the
 * handler keeps one EventBridge event per invocation, the shape the inbox middleware reads, with
 * no batches and no partial-batch responses; and the destination's record says why the event
 * failed, which a plain dead-letter queue does not. The cost is Lambda's fixed retry window
 * (about 3 minutes), which bounds `wait-for-gap` (the inbox's `retryWindowSeconds`).
 *
 * The function logs in with IAM (through RDS Proxy, or directly to the instance or cluster) as the
 * consumer's own database role,
 * `DEFAULT_ROLES.consumer` (created and granted the inbox tables by the migrate function, like the
 * relay's and the monitor's; the application grants it its own tables, see `createBillingSchema`).
 */
import { fileURLToPath } from 'node:url';
import {
  DEFAULT_METRIC_NAMESPACE,
  DEFAULT_ROLES,
  EnvVar,
  INBOX_METRIC_DIMENSION,
  InboxMetricName,
  OUTBOX_BUNDLING,
  type OutboxDatabaseTarget,
  outboxDatabaseConnection,
} from '@outbox-relay-aws/cdk';
import { Duration, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { BILLING_CONSUMER } from './names.ts';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Lambda's retries of a failed asynchronous invocation of the billing function. Its default, set
 * explicitly: an inbox with `order: 'wait-for-gap'` must be given the matching
 * `retryWindowSeconds` (2 retries: 180 s).
 */
export const BILLING_RETRY_ATTEMPTS = 2;

/**
 * Props of {@link BillingConsumer}; where it connects is one of `proxy`, `instance` or `cluster`,
 * as for the relay (IAM authentication either way).
 */
export interface BillingConsumerProps extends OutboxDatabaseTarget {
  /** The bus the outbox relay publishes to. */
  readonly bus: events.IEventBus;
  readonly vpc: ec2.IVpc;
  /**
   * Subnets of the function.
   * @default the VPC's private subnets
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /** Security groups of the function; the proxy (or the instance or cluster) must accept them on its port. */
  readonly securityGroups: ec2.ISecurityGroup[];
  readonly databaseName: string;
  /**
   * Database user the function logs in as.
   * @default 'outbox_consumer' (DEFAULT_ROLES.consumer)
   */
  readonly databaseUser?: string;
  /**
   * Topic the two queue alarms notify.
   * @default no action: the alarms still change state, visible in the console
   */
  readonly alarmTopic?: sns.ITopic;
}

/** The billing Lambda, its rule, its two failure queues and their alarms. */
export class BillingConsumer extends Construct {
  public readonly function: nodejs.NodejsFunction;
  /** Events EventBridge could not deliver into Lambda (after the target's 24 h of retries). */
  public readonly deliveryDeadLetterQueue: sqs.Queue;
  /** Invocation records of events whose handler failed on every attempt (Lambda's on-failure destination). */
  public readonly failedEventsQueue: sqs.Queue;
  public readonly rule: events.Rule;
  public readonly alarms: {
    readonly undelivered: cloudwatch.Alarm;
    readonly failed: cloudwatch.Alarm;
    /** The inbox parked an OrderPlaced: an earlier one of its order was still missing after the wait. */
    readonly parked: cloudwatch.Alarm;
  };

  constructor(scope: Construct, id: string, props: BillingConsumerProps) {
    super(scope, id);
    const user = props.databaseUser ?? DEFAULT_ROLES.consumer;
    const database = outboxDatabaseConnection(props);
    const queue = (name: string) =>
      new sqs.Queue(this, name, {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        retentionPeriod: Duration.days(14),
      });
    this.deliveryDeadLetterQueue = queue('DeadLetterQueue');
    this.failedEventsQueue = queue('FailedEventsQueue');

    this.function = new nodejs.NodejsFunction(this, 'Function', {
      entry: `${repoRoot}examples/billing/handler.ts`,
      projectRoot: repoRoot,
      depsLockFilePath: `${repoRoot}package-lock.json`,
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      timeout: Duration.seconds(30),
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets,
      securityGroups: props.securityGroups,
      environment: {
        ...database.environment(user),
        [EnvVar.pgDatabase]: props.databaseName,
        // Which inbox consumer it runs: `outbox inbox parked replay --function-name` checks it.
        [EnvVar.inboxConsumer]: BILLING_CONSUMER,
      },
      bundling: OUTBOX_BUNDLING,
      retryAttempts: BILLING_RETRY_ATTEMPTS,
      // How long an event may wait in Lambda's queue (throttling), Lambda's default, set explicitly.
      maxEventAge: Duration.hours(6),
      onFailure: new destinations.SqsDestination(this.failedEventsQueue),
    });
    database.grantConnect(this.function, user);
    // cdk-nag (AwsSolutions), acknowledged with reasons rather than silenced.
    for (const policy of ['AWSLambdaBasicExecutionRole', 'AWSLambdaVPCAccessExecutionRole']) {
      if (!this.function.role) break;
      Validations.of(this.function.role).acknowledge({
        id: `AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/${policy}]`,
        reason: `${policy} is the AWS-maintained minimum for a VPC Lambda: its own log group and its network interfaces`,
      });
    }
    for (const q of [this.deliveryDeadLetterQueue, this.failedEventsQueue]) {
      Validations.of(q).acknowledge({
        id: 'AwsSolutions::AwsSolutions-SQS3',
        reason:
          'This queue is itself the end of the line: the rule target dead-letter queue or the function on-failure destination, alarmed on and read by an operator',
      });
    }

    this.rule = new events.Rule(this, 'OrderPlacedRule', {
      eventBus: props.bus,
      eventPattern: { source: ['demo.shop'], detailType: ['OrderPlaced'] },
      description: 'OrderPlaced events from the demo shop to billing',
    });
    this.rule.addTarget(
      new eventTargets.LambdaFunction(this.function, {
        retryAttempts: 185,
        maxEventAge: Duration.hours(24),
        deadLetterQueue: this.deliveryDeadLetterQueue,
      }),
    );

    const alarm = (name: string, metric: cloudwatch.IMetric, description: string) => {
      const created = new cloudwatch.Alarm(this, name, {
        alarmDescription: description,
        metric,
        threshold: 0,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
      if (props.alarmTopic) created.addAlarmAction(new cwActions.SnsAction(props.alarmTopic));
      return created;
    };
    const visible = (q: sqs.Queue) =>
      q.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(5), statistic: 'Maximum' });
    this.alarms = {
      undelivered: alarm(
        'UndeliveredAlarm',
        visible(this.deliveryDeadLetterQueue),
        'EventBridge could not deliver OrderPlaced events to the billing function. Fix the cause, then send the queued events to the bus again.',
      ),
      failed: alarm(
        'FailedEventsAlarm',
        visible(this.failedEventsQueue),
        'The billing handler failed on every attempt for some events. Each message holds the event and the error; fix the cause, then send the event (requestPayload) to the bus or the function again: the inbox applies it once.',
      ),
      // Emitted by the inbox in the function itself (an EMF line per parked event).
      parked: alarm(
        'ParkedAlarm',
        new cloudwatch.Metric({
          namespace: DEFAULT_METRIC_NAMESPACE,
          metricName: InboxMetricName.Parked,
          dimensionsMap: { [INBOX_METRIC_DIMENSION]: BILLING_CONSUMER },
          statistic: 'Sum',
          period: Duration.minutes(5),
        }),
        'The billing inbox parked OrderPlaced events: an earlier one of the same order was still missing after the gap wait. Run: outbox inbox parked list --consumer billing; then replay or discard each.',
      ),
    };
  }
}
