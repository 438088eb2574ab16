/**
 * What the `OutboxRelay` construct watches: its alarms (each notifying one SNS topic), the
 * dashboard, and the alarm topic it creates when none is given.
 */
import { ArnFormat, Duration, Names, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import type { Construct } from 'constructs';
import { METRIC_DIMENSION, METRIC_SERVICE, MetricName } from '../shared/platform/names.ts';
import { OPERATIONS_DOCS_URL, type OutboxRelayProps } from './props.ts';

/** The alarms an `OutboxRelay` creates. */
export interface OutboxAlarms {
  readonly lag: cloudwatch.Alarm;
  readonly deadLetters: cloudwatch.Alarm;
  readonly relayErrors: cloudwatch.Alarm;
  readonly relayThrottles: cloudwatch.Alarm;
  readonly monitorErrors: cloudwatch.Alarm;
  /** Only with a proxy (`database.proxy`). */
  readonly proxyPinnedSessions?: cloudwatch.Alarm;
  /** Inbox events parked (wait-for-gap, `onGapTimeout: 'park'`) and awaiting an operator. */
  readonly inboxParked: cloudwatch.Alarm;
  /** Inbox events whose invocation failed and that no retry applied (`inbox_failed`). */
  readonly inboxFailed: cloudwatch.Alarm;
}

/** A custom metric under the dimension its emitting service sets (names.ts). */
export function outboxMetric(
  namespace: string,
  name: MetricName,
  statistic: string,
  period = Duration.minutes(1),
): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace,
    metricName: name,
    dimensionsMap: { [METRIC_DIMENSION]: METRIC_SERVICE[name] },
    statistic,
    period,
  });
}

/** The sections of docs/operations.md#runbooks the alarms link to, one per alarm. */
export const RUNBOOK_ANCHORS = [
  'lag',
  'dead-lettered-events',
  'relay-errors',
  'relay-throttles',
  'monitor-errors',
  'pinned-proxy-sessions',
  'parked-inbox-events',
  'failed-inbox-events',
] as const;
type RunbookAnchor = (typeof RUNBOOK_ANCHORS)[number];

/** The alarms of an `OutboxRelay`, each notifying `watched.alarmTopic`, each description linking to its runbook. */
export function createAlarms(
  scope: Construct,
  props: OutboxRelayProps,
  namespace: string,
  watched: { relayFunction: lambda.IFunction; monitorFunction: lambda.IFunction; alarmTopic: sns.ITopic },
): OutboxAlarms {
  const metric = (name: MetricName, statistic: string, period?: Duration) =>
    outboxMetric(namespace, name, statistic, period);
  const alarm = (name: string, a: cloudwatch.AlarmProps) => {
    const created = new cloudwatch.Alarm(scope, name, a);
    created.addAlarmAction(new cwActions.SnsAction(watched.alarmTopic));
    return created;
  };
  const lagThreshold = (props.lagAlarmThreshold ?? Duration.minutes(5)).toSeconds();
  // Each alarm links to its section of docs/operations.md#runbooks (test/repo/docs.test.ts checks
  // that the anchors exist).
  const runbook = (anchor: RunbookAnchor) => `${props.runbookUrl ?? OPERATIONS_DOCS_URL}#${anchor}`;
  return {
    lag: alarm('LagAlarm', {
      alarmDescription: `The oldest pending outbox event is older than ${lagThreshold} s, or the monitor stopped reporting. Run: outbox status. Runbook: ${runbook('lag')}`,
      metric: metric(MetricName.OldestPendingAge, 'Maximum'),
      threshold: lagThreshold,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 3,
      datapointsToAlarm: 3,
      // No data means no monitor: that must alarm too.
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    }),
    deadLetters: alarm('DeadLetterAlarm', {
      alarmDescription: `Outbox events were dead-lettered. Run: outbox dead-letters list. Runbook: ${runbook('dead-lettered-events')}`,
      metric: metric(MetricName.DeadLettered, 'Maximum', Duration.minutes(5)),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }),
    relayErrors: alarm('RelayErrorAlarm', {
      alarmDescription: `Relay invocations failed. See the relay log group. Runbook: ${runbook('relay-errors')}`,
      metric: watched.relayFunction.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }),
    relayThrottles: alarm('RelayThrottleAlarm', {
      alarmDescription: `PutEvents throttled the relay. Consider a quota increase or lower OUTBOX_PUBLISH_CONCURRENCY. Runbook: ${runbook('relay-throttles')}`,
      metric: metric(MetricName.Throttled, 'Sum', Duration.minutes(5)),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }),
    monitorErrors: alarm('MonitorErrorAlarm', {
      alarmDescription: `Monitor invocations failed (pruning or metrics). See the monitor log group. Runbook: ${runbook('monitor-errors')}`,
      metric: watched.monitorFunction.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }),
    // Pinning is RDS Proxy's: a direct connection is a session of its own anyway.
    ...(props.database.proxy && {
      proxyPinnedSessions: alarm('ProxyPinnedSessionsAlarm', {
        alarmDescription: `RDS Proxy connections are pinned: some client sets session state. Runbook: ${runbook('pinned-proxy-sessions')}`,
        metric: new cloudwatch.Metric({
          namespace: 'AWS/RDS',
          metricName: 'DatabaseConnectionsCurrentlySessionPinned',
          dimensionsMap: { ProxyName: props.database.proxy.dbProxyName },
          statistic: 'Maximum',
          period: Duration.minutes(5),
        }),
        threshold: 0,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 3,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
    }),
    // The monitor counts parked inbox records of every consumer whose inbox lives in this
    // database; it stays in alarm until each is replayed or discarded.
    inboxParked: alarm('InboxParkedAlarm', {
      alarmDescription: `Inbox events are parked, waiting for an operator. Run: outbox inbox parked list --consumer <name>. Runbook: ${runbook('parked-inbox-events')}`,
      metric: metric(MetricName.InboxParked, 'Maximum', Duration.minutes(5)),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }),
    // The monitor counts the failed inbox events of every consumer in this database once Lambda's
    // retries are over (5 minutes after the last attempt): the event failed, or a wrapper answered
    // for its failure. It stays in alarm until a delivery applies them or they are pruned.
    inboxFailed: alarm('InboxFailedAlarm', {
      alarmDescription: `Inbox events failed and no retry applied them (a wrapper may have answered for the failure). Run: outbox inbox failed list --consumer <name>. Runbook: ${runbook('failed-inbox-events')}`,
      metric: metric(MetricName.InboxFailed, 'Maximum', Duration.minutes(5)),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    }),
  };
}

/** The dashboard: lag, throughput, backlog and relay health. */
export function createDashboard(
  scope: Construct,
  props: OutboxRelayProps,
  namespace: string,
): cloudwatch.Dashboard {
  const metric = (name: MetricName, statistic: string) => outboxMetric(namespace, name, statistic);
  return new cloudwatch.Dashboard(scope, 'Dashboard', {
    dashboardName:
      props.dashboardName ??
      `${Names.uniqueResourceName(scope, { maxLength: 200, separator: '-' })}-${Stack.of(scope).region}`,
    widgets: [
      [
        new cloudwatch.GraphWidget({
          title: 'Lag: oldest pending event (s)',
          left: [metric(MetricName.OldestPendingAge, 'Maximum')],
          width: 12,
        }),
        new cloudwatch.GraphWidget({
          title: 'Throughput (events published)',
          left: [metric(MetricName.Published, 'Sum')],
          width: 12,
        }),
      ],
      [
        new cloudwatch.GraphWidget({
          title: 'Backlog',
          left: [metric(MetricName.Pending, 'Maximum'), metric(MetricName.InFlight, 'Maximum')],
          right: [
            metric(MetricName.DeadLettered, 'Maximum'),
            metric(MetricName.InboxParked, 'Maximum'),
            metric(MetricName.InboxFailed, 'Maximum'),
            metric(MetricName.ExtraRelays, 'Sum'),
          ],
          width: 12,
        }),
        new cloudwatch.GraphWidget({
          title: 'Relay health',
          left: [
            metric(MetricName.Retried, 'Sum'),
            metric(MetricName.Throttled, 'Sum'),
            metric(MetricName.BackPressure, 'Sum'),
            metric(MetricName.LeaseLost, 'Sum'),
            metric(MetricName.LeaseRenewals, 'Sum'),
          ],
          right: [metric(MetricName.PutEventsLatency, 'Average')],
          width: 12,
        }),
      ],
    ],
  });
}

/**
 * An SNS topic encrypted with its own key, which CloudWatch alarms of this account and region may
 * publish to. Alarms publish as the service principal `cloudwatch.amazonaws.com`, so both the topic
 * policy (the SSL-only policy replaces SNS's default one, which allowed the account) and the key
 * policy must allow it; otherwise every alarm changes state and no notification is ever sent. The
 * aws:SourceAccount and aws:SourceArn conditions keep other accounts' alarms out (the SNS
 * developer guide's key management page, "compatibility with AWS services").
 */
export function createAlarmTopic(scope: Construct): sns.Topic {
  const stack = Stack.of(scope);
  const cloudwatchPrincipal = new iam.ServicePrincipal('cloudwatch.amazonaws.com');
  const fromOurAlarms = {
    StringEquals: { 'aws:SourceAccount': stack.account },
    ArnLike: {
      'aws:SourceArn': stack.formatArn({
        service: 'cloudwatch',
        resource: 'alarm',
        resourceName: '*',
        arnFormat: ArnFormat.COLON_RESOURCE_NAME,
      }),
    },
  };
  const key = new kms.Key(scope, 'AlarmTopicKey', {
    enableKeyRotation: true,
    description: 'Outbox relay alarm topic',
  });
  key.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'CloudWatchAlarmsPublishToTheAlarmTopic',
      principals: [cloudwatchPrincipal],
      actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
      // In a key policy "*" means this key.
      resources: ['*'],
      conditions: fromOurAlarms,
    }),
  );
  const topic = new sns.Topic(scope, 'AlarmTopic', {
    displayName: 'Outbox relay alarms',
    masterKey: key,
    enforceSSL: true,
  });
  topic.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'CloudWatchAlarmsPublish',
      principals: [cloudwatchPrincipal],
      actions: ['sns:Publish'],
      resources: [topic.topicArn],
      conditions: fromOurAlarms,
    }),
  );
  return topic;
}
