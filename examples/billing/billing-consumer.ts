/**
 * CDK wiring of the example consumer: the OutboxConsumer construct, subscribing the billing Lambda
 * (handler.ts) to OrderPlaced (events.ts) on the outbox's bus. What the construct builds, and why:
 * docs/consumer-deploying.md#retries-and-what-happens-after-them and infra/outbox-consumer.ts.
 *
 * - **Delivery into Lambda** failed (throttled Invoke API, missing permission, function deleted):
 *   the rule target's retries (24 hours, 185 attempts), then `deadLetterQueue`.
 * - **The handler failed** (an error, a timeout, a lost connection, `InboxGapError`): Lambda retries
 *   twice (1 and then 2 minutes later), then sends the invocation record to `failedEventsQueue`.
 *   The construct gives the function the matching inbox settings (`retryWindowSeconds` 180), so
 *   consumer.ts does not state them.
 *
 * The function logs in with IAM as `outbox_consumer` (DEFAULT_ROLES.consumer), the shared consumer
 * role the demo's migration creates; a consumer of your own would keep the construct's default,
 * its own role `outbox_consumer_<name>` (list it in the relay's `migration.inboxConsumers`).
 */
import { fileURLToPath } from 'node:url';
import { DEFAULT_ROLES, OutboxConsumer, type OutboxDatabaseTarget } from '@outbox-relay-aws/cdk';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as events from 'aws-cdk-lib/aws-events';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type { Construct } from 'constructs';
import { OrderPlaced } from './events.ts';
import { BILLING_CONSUMER } from './names.ts';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

/** Lambda's retries of a failed asynchronous invocation of the billing function (its default). */
export const BILLING_RETRY_ATTEMPTS = 2;

/** Props of {@link BillingConsumer}; where it connects is one of `proxy`, `instance` or `cluster`. */
export interface BillingConsumerProps extends OutboxDatabaseTarget {
  /** The classic bus the outbox relay publishes to (`relay.eventBus`); or give `customEventBusArn`. */
  readonly bus?: events.IEventBus;
  /**
   * The Custom Event Bus the relay publishes to (`relay.customEventBusArn`): a FIFO subscriber
   * invokes the function (docs/consumer-deploying.md#on-a-custom-event-bus-eventsv2). @default none
   */
  readonly customEventBusArn?: string;
  readonly vpc: ec2.IVpc;
  /** Subnets of the function. @default the VPC's private subnets */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /** Security groups of the function; the proxy (or the instance or cluster) must accept them on its port. */
  readonly securityGroups: ec2.ISecurityGroup[];
  readonly databaseName: string;
  /** Database user the function logs in as. @default 'outbox_consumer' (DEFAULT_ROLES.consumer) */
  readonly databaseUser?: string;
  /** Topic the alarms notify. @default no action: the alarms still change state */
  readonly alarmTopic?: sns.ITopic;
  /** `direct` (the rule invokes the function) or `queue` (through an SQS queue). @default 'direct' */
  readonly topology?: 'direct' | 'queue';
}

/** The billing Lambda, its rule, its two failure queues and their alarms. */
export class BillingConsumer extends OutboxConsumer {
  constructor(
    scope: Construct,
    id: string,
    { bus, customEventBusArn, databaseUser, topology, ...props }: BillingConsumerProps,
  ) {
    super(scope, id, {
      ...props,
      topology,
      consumer: BILLING_CONSUMER,
      ...(customEventBusArn ? { customEventBusArn } : { eventBus: bus }),
      events: [OrderPlaced],
      entry: `${repoRoot}examples/billing/handler.ts`,
      // The repository is the project: its lock file, its esbuild.
      functionProps: { projectRoot: repoRoot, depsLockFilePath: `${repoRoot}package-lock.json` },
      databaseUser: databaseUser ?? DEFAULT_ROLES.consumer,
      // Queue topology: the queue's receives stand for Lambda's retries (maxReceiveCount 5).
      // On a Custom Event Bus the subscriber retries (deliveryRetryAttempts, deliveryMaxEventAge).
      ...(topology === 'queue' || customEventBusArn ? {} : { retryAttempts: BILLING_RETRY_ATTEMPTS }),
      // wait-for-gap: an OrderPlaced ahead of a missing one fails (InboxGapError) until the gap wait
      // ends, by design; the errors alarm leaves those out (InboxGapRetry), so its default, 0, holds.
    });
  }
}
