/**
 * The inbox's failed events (`inbox_failed`, migration 019): what `outbox inbox failed list` shows.
 *
 * The inbox writes a trace for every invocation that did not commit (the handler's error, a gap
 * under wait-for-gap, a COMMIT that failed, its deadline, a wrapper's abort), outside the
 * rolled-back transaction and before the failure leaves it; the transaction that later applies,
 * parks or acknowledges the event deletes it. What is left is an event no delivery applied: being
 * retried (its last attempt is recent), in the function's on-failure destination, or, when a
 * wrapper answered for the failure (a middy `onError` that returns a value, `timeoutEarlyResponse`),
 * nowhere else. `outbox inbox failed replay` invokes the consumer's function with them again.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Queryable } from '../../platform/db.ts';
import { type DbFailedEvent, hasFailureTrace, selectFailed, selectFailedForReplay } from './sql/index.ts';

/**
 * How old a failed inbox event's last attempt must be to count as failed, seconds: past Lambda's
 * asynchronous retries (about 1 and 2 minutes apart; LAMBDA_ASYNC_RETRY_WINDOW_SECONDS, 180), so
 * that an event still being retried (a wait-for-gap wait, a passing outage) does not count.
 */
export const INBOX_FAILED_SETTLE_SECONDS = 300;

/** A failed event, as `outbox inbox failed list` shows it. */
export interface FailedEvent {
  consumer: string;
  /** `metadata.eventId`; `eventbridge:` and EventBridge's id for an event without a readable one. */
  eventId: string;
  /** The consumer's deduplication key; null when the failure came before it was computed. */
  key: string | null;
  /** The DetailType, from the event. */
  type: string;
  /** `aggregateType/aggregateId`, from the event's metadata ('' when unreadable). */
  aggregate: string;
  /** Its position in the aggregate (`metadata.sequence`), as the event carries it. */
  sequence: unknown;
  /**
   * The last attempt's error: its name (`InboxGapError`, `InboxAbortedError`, the handler's own…,
   * or `InboxAttemptUnfinished` for an attempt that began and reported nothing: its wrapper
   * answered for it, or the container was frozen or stopped) and message.
   */
  errorName: string;
  errorMessage: string;
  attempts: number;
  firstFailedAt: Date;
  lastFailedAt: Date;
  /** The EventBridge event as the consumer's function received it. */
  event: EventBridgeEvent<string, unknown>;
}

const toFailed = (r: DbFailedEvent): FailedEvent => {
  const metadata = (r.event?.detail as { metadata?: Record<string, unknown> } | undefined)?.metadata;
  const aggregate =
    metadata && typeof metadata.aggregateType === 'string'
      ? `${metadata.aggregateType}/${String(metadata.aggregateId)}`
      : '';
  return {
    consumer: r.consumer,
    eventId: r.event_id,
    key: r.message_key,
    type: typeof r.event?.['detail-type'] === 'string' ? r.event['detail-type'] : '',
    aggregate,
    sequence: metadata?.sequence,
    errorName: r.error_name,
    errorMessage: r.error_message,
    attempts: r.attempts,
    firstFailedAt: r.first_failed_at,
    lastFailedAt: r.last_failed_at,
    event: r.event,
  };
};

/**
 * A consumer's failed events, oldest first (by first failure), those still being retried included.
 * @param limit at most this many
 */
export async function listFailed(sql: Queryable, consumer: string, limit = 100): Promise<FailedEvent[]> {
  return (await selectFailed(sql, consumer, limit)).map(toFailed);
}

/**
 * The failed events to replay, in each aggregate's order (`sequence`), aggregate by aggregate.
 * @param options `eventIds`: only these; `settledSeconds`: only those whose last attempt is older
 *   (default {@link INBOX_FAILED_SETTLE_SECONDS}, as the monitor counts them: Lambda is no
 *   longer retrying them)
 */
export async function failedForReplay(
  sql: Queryable,
  consumer: string,
  options: { eventIds?: readonly string[]; settledSeconds?: number } = {},
): Promise<FailedEvent[]> {
  const rows = await selectFailedForReplay(
    sql,
    consumer,
    options.settledSeconds ?? INBOX_FAILED_SETTLE_SECONDS,
    options.eventIds,
  );
  return rows.map(toFailed);
}

/**
 * Whether the event is still failed for the consumer: its trace is there. The inbox deletes the
 * trace in the transaction that applies, parks or acknowledges the event, so after a replay it is
 * gone exactly when the delivery was taken.
 */
export function isStillFailed(sql: Queryable, consumer: string, eventId: string): Promise<boolean> {
  return hasFailureTrace(sql, consumer, eventId);
}
