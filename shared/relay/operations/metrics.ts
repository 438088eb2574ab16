/**
 * CloudWatch metrics, as Embedded Metric Format through Powertools for AWS Lambda (Metrics): the
 * Lambda writes JSON lines to its log and CloudWatch extracts the metrics, no API calls. Every
 * unit is set here, every name comes from platform/names.ts, and all are listed in docs/operations.md#metrics.
 */
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { DEFAULT_METRIC_NAMESPACE, MetricName, type ServiceName } from '../../platform/index.ts';
import type { RelayCounts } from '../index.ts';
import type { PruneResult } from './prune.ts';
import type { ScaleOutResult } from './scale-out.ts';
import type { OutboxStatus } from './status.ts';

/** A Powertools Metrics instance for one of our functions. */
export function createMetrics(
  serviceName: typeof ServiceName.relay | typeof ServiceName.monitor,
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
  metrics.addMetric(MetricName.BackPressure, MetricUnit.Count, c.backPressure);
  metrics.addMetric(MetricName.LeaseRenewals, MetricUnit.Count, c.leaseRenewals);
  if (c.putEventsCalls > 0) {
    metrics.addMetric(
      MetricName.PutEventsLatency,
      MetricUnit.Milliseconds,
      Math.round(c.putEventsMs / c.putEventsCalls),
    );
  }
}

/**
 * Adds the monitor's backlog figures (when measured: `s` undefined when the status failed), its
 * pruning figures, and the extra relays it started (when it scales the relays out).
 */
export function addMonitorMetrics(
  metrics: Metrics,
  s: OutboxStatus | undefined,
  p: PruneResult | undefined,
  scaleOut?: ScaleOutResult,
): void {
  if (s) {
    metrics.addMetric(
      MetricName.OldestPendingAge,
      MetricUnit.Seconds,
      Math.round(s.oldestPendingAgeSeconds * 1000) / 1000,
    );
    metrics.addMetric(MetricName.Pending, MetricUnit.Count, s.pending);
    metrics.addMetric(MetricName.InFlight, MetricUnit.Count, s.inFlight);
    metrics.addMetric(MetricName.DeadLettered, MetricUnit.Count, s.deadLettered);
    metrics.addMetric(MetricName.InboxParked, MetricUnit.Count, s.inboxParked);
    metrics.addMetric(MetricName.InboxFailed, MetricUnit.Count, s.inboxFailed);
  }
  if (p) {
    metrics.addMetric(
      MetricName.PrunedRows,
      MetricUnit.Count,
      p.publishedDeleted + p.deadLettersDeleted + p.inboxDeleted,
    );
    metrics.addMetric(MetricName.PruneDuration, MetricUnit.Milliseconds, p.durationMs);
  }
  if (scaleOut) metrics.addMetric(MetricName.ExtraRelays, MetricUnit.Count, scaleOut.started);
}
