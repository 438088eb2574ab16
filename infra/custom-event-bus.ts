/**
 * The Custom Event Bus (EventsV2) of an `OutboxRelay` (docs/relay-construct.md#the-custom-event-bus-eventsv2):
 * its props checked, the bus created (`AWS::EventsV2::EventBus`) or taken by ARN, the relay's
 * permission to put events on it, and the alarms on its `AWS/EventsV2` metrics.
 *
 * What was checked against what (EventBridge User Guide, Custom Event Bus chapters): the IAM
 * namespace is `events:` and PutEvents on the Custom Event Bus is authorised as `events:PutEvents`
 * on the bus's `event-busv2` ARN ("Names, endpoints, and IAM permissions", "Permissions by
 * scenario"); a bus with a customer managed key needs its key policy to allow
 * `events.amazonaws.com` (same page); subscriber metrics are in `AWS/EventsV2` with the
 * dimensions `EventBus` and `Subscriber`, each an ARN, and deliveries that failed show as
 * `OnFailureDestinationDelivered` (sent to the subscriber's dead-letter queue) and `EventsDropped`
 * ("Observability for the Custom Event Bus").
 */
import { Duration, Names, Token } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as eventsv2 from 'aws-cdk-lib/aws-eventsv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type { Construct } from 'constructs';
import { OutboxConfigError } from '../shared/platform/errors.ts';
import { DEFAULT_CUSTOM_BUS_RETENTION_DAYS, type OutboxRelayProps } from './props.ts';

/** The CloudWatch namespace of the Custom Event Bus's metrics. */
export const EVENTSV2_NAMESPACE = 'AWS/EventsV2';

/**
 * What `events.amazonaws.com` needs on a Custom Event Bus's customer managed key (User Guide,
 * eb-custom-bus-encryption: without them the bus goes CREATE_FAILED), with `kms:GenerateDataKey`
 * and `kms:DescribeKey`, which the classic bus's key page (eb-encryption-key-policy) lists.
 */
export const CUSTOM_BUS_SERVICE_KEY_ACTIONS = [
  'kms:Decrypt',
  'kms:Encrypt',
  'kms:GenerateDataKey',
  'kms:GenerateDataKeyWithoutPlaintext',
  'kms:ReEncryptFrom',
  'kms:ReEncryptTo',
  'kms:DescribeKey',
] as const;

/** A Custom Event Bus ARN (the EventsV2 API's `EventBusArn`, whose id is 25 characters; not checked here). */
const CUSTOM_BUS_ARN =
  /^arn:aws[\w-]*:events:[a-z0-9-]+:\d{12}:event-busv2\/[A-Za-z0-9][.\-_A-Za-z0-9]{0,255}\/[^/\s]+$/;
/** A bus name (`AWS::EventsV2::EventBus` `Name`). */
const CUSTOM_BUS_NAME = /^[A-Za-z0-9][.\-_A-Za-z0-9]{0,255}$/;

/**
 * Checks {@link OutboxRelayProps.customEventBus} against the rest of the props.
 * @throws {OutboxConfigError} naming the prop: `eventBus` (both buses), `customEventBus.existingArn`
 *   (not a Custom Event Bus ARN), `customEventBus.retentionDays` (not 1–365, or with an existing bus),
 *   `customEventBus.kmsKey` / `customEventBus.name` (with an existing bus, or a bad name)
 */
export function validateCustomEventBus(props: OutboxRelayProps): void {
  const custom = props.customEventBus;
  if (custom === undefined) return;
  const fail = (field: string, message: string): never => {
    throw new OutboxConfigError(field, `OutboxRelay: ${message}`);
  };
  if (props.eventBus !== undefined) {
    fail('eventBus', 'set eventBus (a classic bus) or customEventBus (a Custom Event Bus), not both');
  }
  if (custom.existingArn !== undefined) {
    if (!Token.isUnresolved(custom.existingArn) && !CUSTOM_BUS_ARN.test(custom.existingArn)) {
      fail(
        'customEventBus.existingArn',
        `expected a Custom Event Bus ARN, arn:aws:events:<region>:<account>:event-busv2/<name>/<id>, got ${JSON.stringify(custom.existingArn)}`,
      );
    }
    for (const field of ['retentionDays', 'kmsKey', 'name'] as const) {
      if (custom[field] !== undefined) {
        fail(`customEventBus.${field}`, 'applies only to a bus the construct creates, not with existingArn');
      }
    }
  }
  const days = custom.retentionDays;
  if (days !== undefined && (!Number.isInteger(days) || days < 1 || days > 365)) {
    fail('customEventBus.retentionDays', `expected whole days from 1 to 365, got ${String(days)}`);
  }
  if (custom.name !== undefined && !Token.isUnresolved(custom.name) && !CUSTOM_BUS_NAME.test(custom.name)) {
    fail(
      'customEventBus.name',
      `expected a letter or digit, then letters, digits, ".", "-" or "_", at most 256 characters, got ${JSON.stringify(custom.name)}`,
    );
  }
}

/** The Custom Event Bus the relay publishes to: the ARN, and the resource when the construct made it. */
export interface OutboxCustomEventBus {
  readonly arn: string;
  readonly bus: eventsv2.CfnEventBus | undefined;
}

/**
 * Creates the Custom Event Bus (retention, encryption) or takes the existing one.
 * @param custom the validated {@link OutboxRelayProps.customEventBus}
 */
export function customEventBus(
  scope: Construct,
  custom: NonNullable<OutboxRelayProps['customEventBus']>,
): OutboxCustomEventBus {
  if (custom.existingArn !== undefined) return { arn: custom.existingArn, bus: undefined };
  const bus = new eventsv2.CfnEventBus(scope, 'CustomBus', {
    name: custom.name ?? Names.uniqueResourceName(scope, { maxLength: 256, separator: '-' }),
    description: 'Outbox events, FIFO per aggregate and deduplicated by event id',
    storageConfiguration: {
      retentionPeriodInDays: custom.retentionDays ?? DEFAULT_CUSTOM_BUS_RETENTION_DAYS,
    },
    // Without it EventBridge encrypts with an AWS owned key.
    ...(custom.kmsKey ? { encryptionConfiguration: { kmsKeyIdentifier: custom.kmsKey.keyArn } } : {}),
  });
  if (custom.kmsKey instanceof kms.Key) {
    // The service encrypts and decrypts the stored events as events.amazonaws.com; without the
    // actions of eb-custom-bus-encryption the bus goes CREATE_FAILED. An imported key's policy is
    // not this stack's: documented instead.
    custom.kmsKey.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'EventBridgeCustomEventBus',
        principals: [new iam.ServicePrincipal('events.amazonaws.com')],
        actions: [...CUSTOM_BUS_SERVICE_KEY_ACTIONS],
        // In a key policy "*" means this key.
        resources: ['*'],
      }),
    );
  }
  return { arn: bus.attrEventBusArn, bus };
}

/**
 * Lets `grantee` put events on the Custom Event Bus: `events:PutEvents` on its ARN and, when the
 * bus has a customer managed key, `kms:Decrypt` on that key (PutEvents on such a bus checks
 * `kms:Decrypt` with the caller's credentials, eb-custom-bus-encryption). Nothing else.
 */
export function grantCustomBusPutEvents(grantee: iam.IGrantable, busArn: string, key?: kms.IKey): void {
  iam.Grant.addToPrincipal({ grantee, actions: ['events:PutEvents'], resourceArns: [busArn] });
  if (key !== undefined) {
    iam.Grant.addToPrincipal({ grantee, actions: ['kms:Decrypt'], resourceArns: [key.keyArn] });
  }
}

/** The relay's alarms on the Custom Event Bus, across every subscriber of the bus. */
export interface OutboxCustomBusAlarms {
  /** Events a subscriber of the bus sent to its dead-letter queue after its retries. */
  readonly deadLettered: cloudwatch.Alarm;
  /** Events a subscriber of the bus dropped (no dead-letter queue, or sending there failed). */
  readonly dropped: cloudwatch.Alarm;
}

/**
 * A CloudWatch Metrics Insights query summing a subscriber metric over every subscriber of the bus,
 * per 5 minutes. Subscriber metrics carry `EventBus` and `Subscriber`; a query, unlike a metric
 * with dimensions, needs no subscriber named, so one alarm covers subscribers created later
 * (Metrics Insights alarms query the last 3 hours, enough for a 5-minute period).
 */
function perBus(busArn: string, metricName: string, label: string): cloudwatch.MathExpression {
  return new cloudwatch.MathExpression({
    expression: `SELECT SUM(${metricName}) FROM SCHEMA("${EVENTSV2_NAMESPACE}", EventBus, Subscriber) WHERE EventBus = '${busArn}'`,
    period: Duration.minutes(5),
    label,
  });
}

/** The alarms of {@link OutboxCustomBusAlarms}, notifying `topic`. */
export function createCustomBusAlarms(
  scope: Construct,
  busArn: string,
  topic: sns.ITopic,
): OutboxCustomBusAlarms {
  const alarm = (id: string, metric: cloudwatch.IMetric, description: string) => {
    const created = new cloudwatch.Alarm(scope, id, {
      alarmDescription: description,
      metric,
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    created.addAlarmAction(new cwActions.SnsAction(topic));
    return created;
  };
  return {
    deadLettered: alarm(
      'CustomBusDeadLetteredAlarm',
      perBus(busArn, 'OnFailureDestinationDelivered', 'dead-lettered by subscribers'),
      "A subscriber of the outbox's Custom Event Bus could not deliver events and sent them to its dead-letter queue (the record carries no payload: replay from the bus or the outbox). See the subscriber's own alarms.",
    ),
    dropped: alarm(
      'CustomBusDroppedAlarm',
      perBus(busArn, 'EventsDropped', 'dropped by subscribers'),
      "A subscriber of the outbox's Custom Event Bus dropped events (retries exhausted with no dead-letter queue, or the dead-letter queue refused them). Replay them from the bus (a POINT_IN_TIME subscriber) or the outbox.",
    ),
  };
}
