/**
 * The `OutboxConsumer`'s subscription on a Custom Event Bus: the FIFO subscriber, its filter and
 * the role it assumes (on a classic bus the consumer has a rule instead: outbox-consumer.ts).
 */
import { Names } from 'aws-cdk-lib';
import * as eventsv2 from 'aws-cdk-lib/aws-eventsv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS, type OutboxConsumerProps } from './consumer-props.ts';

/** The subscriber's filter: the consumer's sources and detail types, evaluated on the event's data. */
export function subscriberFilterPattern(sources: string[], types: string[]): string {
  return JSON.stringify({ source: sources, 'detail-type': types });
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
export function createSubscriber(
  scope: Construct,
  props: OutboxConsumerProps,
  target: {
    readonly function: lambda.IFunction;
    readonly deadLetterQueue: sqs.IQueue;
    /** Queue topology: the SQS FIFO queue the subscriber sends to, which the function reads. */
    readonly queue?: sqs.IQueue;
  },
  busArn: string,
  sources: string[],
  types: string[],
  maxEventAgeSeconds: number,
): { subscriber: eventsv2.CfnSubscriber; role: iam.Role } {
  const role = new iam.Role(scope, 'SubscriberRole', {
    assumedBy: new iam.ServicePrincipal('events.amazonaws.com'),
    description: `Custom Event Bus subscriber of the inbox consumer ${props.consumer}: invoke its function, record failures`,
  });
  const queue = target.queue;
  // The function itself, unqualified: the subscriber names no version or alias.
  if (!queue) {
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['lambda:InvokeFunction'],
        resources: [target.function.functionArn],
      }),
    );
  }
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({
      actions: ['sqs:SendMessage'],
      resources: [target.deadLetterQueue.queueArn, ...(queue ? [queue.queueArn] : [])],
    }),
  );
  queue?.encryptionMasterKey?.grant(role, 'kms:GenerateDataKey*', 'kms:Decrypt');
  target.deadLetterQueue.encryptionMasterKey?.grant(role, 'kms:GenerateDataKey*', 'kms:Decrypt');
  const subscriber = new eventsv2.CfnSubscriber(scope, 'Subscriber', {
    name: Names.uniqueResourceName(scope, { maxLength: 64, separator: '-' }),
    description:
      `${types.join(', ')} from ${sources.join(', ')} to the inbox consumer ${props.consumer}`.slice(0, 512),
    eventBusArn: busArn,
    type: 'FIFO',
    filterConfiguration: {
      filters: [{ scope: 'DATA', pattern: subscriberFilterPattern(sources, types) }],
    },
    invokeConfiguration: queue
      ? {
          // Queue topology ("Amazon SQS queue target"): each aggregate a message group of the FIFO
          // queue, so the queue keeps the subscriber's order per aggregate; deduplicated by the
          // outbox event id (the relay's DeduplicationId), stable across the subscriber's retries.
          targetArn: queue.queueArn,
          roleArn: role.roleArn,
          sqsParameters: {
            messageGroupId: '{% $events.SystemMetadata.EventGroupId %}',
            messageDeduplicationId: '{% $events.SystemMetadata.DeduplicationId %}',
          },
        }
      : {
          targetArn: target.function.functionArn,
          roleArn: role.roleArn,
          lambdaParameters: {
            invocationType: 'REQUEST_RESPONSE',
            invocationTimeoutSeconds: String(CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS),
          },
        },
    ...(queue ? {} : { batchConfiguration: { maxBatchSize: 1 } }),
    retryPolicy: {
      maxRetryAttempts: props.deliveryRetryAttempts ?? 185,
      maxEventAgeInSeconds: maxEventAgeSeconds,
    },
    onFailureConfiguration: { arn: target.deadLetterQueue.queueArn },
  });
  // The role's policy first: a delivery before it exists would be denied and retried.
  const policy = role.node.tryFindChild('DefaultPolicy');
  if (policy) subscriber.node.addDependency(policy);
  return { subscriber, role };
}
