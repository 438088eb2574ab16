/**
 * The inbox's metrics, as CloudWatch Embedded Metric Format: one JSON line on stdout per applied
 * event (`ConsumerLag`), per heartbeat, and per event that was not simply applied in order, which
 * CloudWatch Logs turns into a metric with no API call and
 * no dependency in the consumer's bundle ("Specification: Embedded metric format", CloudWatch
 * User Guide). Lambda's runtime forwards stdout to the function's log group as it is.
 */
import { DEFAULT_METRIC_NAMESPACE, INBOX_METRIC_DIMENSION, type InboxMetricName } from '../platform/names.ts';

/** Where the inbox's metrics go. */
export interface InboxMetricsOptions {
  /** CloudWatch namespace. Default `Outbox` ({@link DEFAULT_METRIC_NAMESPACE}). */
  namespace?: string;
  /** Receives each EMF line. Default: written to stdout. */
  write?: (line: string) => void;
}

/** A value other than a count of 1: seconds (a lag, an age) or a count of several. */
export interface InboxMetricValue {
  value: number;
  unit: 'Count' | 'Seconds';
}

/**
 * Emits one value for `consumer` (a count of 1 unless `measured` says otherwise); nothing when
 * metrics are off. `properties` go into the EMF line beside the value (searchable in CloudWatch
 * Logs, not dimensions).
 */
export type InboxMetricSink = (
  name: InboxMetricName,
  properties?: Record<string, string>,
  measured?: InboxMetricValue,
) => void;

/** Builds the sink of one consumer. */
export function inboxMetrics(
  consumer: string,
  options: InboxMetricsOptions | false | undefined,
): InboxMetricSink {
  if (options === false) return () => {};
  const namespace = options?.namespace ?? DEFAULT_METRIC_NAMESPACE;
  const write = options?.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  return (name, properties, measured) =>
    write(
      JSON.stringify({
        ...properties,
        _aws: {
          Timestamp: Date.now(),
          CloudWatchMetrics: [
            {
              Namespace: namespace,
              Dimensions: [[INBOX_METRIC_DIMENSION]],
              Metrics: [{ Name: name, Unit: measured?.unit ?? 'Count' }],
            },
          ],
        },
        [INBOX_METRIC_DIMENSION]: consumer,
        [name]: measured?.value ?? 1,
      }),
    );
}
