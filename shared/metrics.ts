/**
 * CloudWatch metrics, as Embedded Metric Format through Powertools for AWS Lambda (Metrics): the
 * Lambda writes JSON lines to its log and CloudWatch extracts the metrics, no API calls. Every
 * name, unit and dimension is defined here and listed in the README ("Operations").
 */
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { PruneResult } from './prune.ts';
import type { RelayCounts } from './relay/relay.ts';
import type { OutboxStatus } from './status.ts';

/** Default CloudWatch namespace (`OUTBOX_METRIC_NAMESPACE`). */
export const DEFAULT_METRIC_NAMESPACE = 'Outbox';

/** Metric names. Dimension on all of them: `service` (`outbox-relay` or `outbox-monitor`). */
export const MetricName = {
  // monitor
  OldestPendingAge: 'OldestPendingAgeSeconds',
  Pending: 'PendingCount',
  InFlight: 'InFlightCount',
  DeadLettered: 'DeadLetteredCount',
  PrunedRows: 'PrunedRows',
  PruneDuration: 'PruneDuration',
  // relay
  Published: 'Published',
  Retried: 'Retried',
  DeadLetteredByRelay: 'DeadLettered',
  LeaseLost: 'LeaseLost',
  Throttled: 'Throttled',
  PutEventsLatency: 'PutEventsLatency',
} as const;

/** A Powertools Metrics instance for one of our functions. */
export function createMetrics(
  serviceName: 'outbox-relay' | 'outbox-monitor',
  namespace = DEFAULT_METRIC_NAMESPACE,
): Metrics {
  return new Metrics({ namespace, serviceName });
}

/** Adds the relay's per-invocation counts; call `metrics.publishStoredMetrics()` (or use the middleware) to flush. */
export function addRelayMetrics(metrics: Metrics, c: RelayCounts): void {
  metrics.addMetric(MetricName.Published, MetricUnit.Count, c.published);
  metrics.addMetric(MetricName.Retried, MetricUnit.Count, c.retried);
  metrics.addMetric(MetricName.DeadLetteredByRelay, MetricUnit.Count, c.deadLettered);
  metrics.addMetric(MetricName.LeaseLost, MetricUnit.Count, c.leaseLost);
  metrics.addMetric(MetricName.Throttled, MetricUnit.Count, c.throttled);
  if (c.putEventsCalls > 0) {
    metrics.addMetric(
      MetricName.PutEventsLatency,
      MetricUnit.Milliseconds,
      Math.round(c.putEventsMs / c.putEventsCalls),
    );
  }
}

/** Adds the monitor's backlog and pruning figures. */
export function addMonitorMetrics(metrics: Metrics, s: OutboxStatus, p: PruneResult | undefined): void {
  metrics.addMetric(
    MetricName.OldestPendingAge,
    MetricUnit.Seconds,
    Math.round(s.oldestPendingAgeSeconds * 1000) / 1000,
  );
  metrics.addMetric(MetricName.Pending, MetricUnit.Count, s.pending);
  metrics.addMetric(MetricName.InFlight, MetricUnit.Count, s.inFlight);
  metrics.addMetric(MetricName.DeadLettered, MetricUnit.Count, s.deadLettered);
  if (p) {
    metrics.addMetric(
      MetricName.PrunedRows,
      MetricUnit.Count,
      p.publishedDeleted + p.deadLettersDeleted + p.inboxDeleted,
    );
    metrics.addMetric(MetricName.PruneDuration, MetricUnit.Milliseconds, p.durationMs);
  }
}
