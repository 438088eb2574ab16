/**
 * The inbox's failure trace (`inbox_failed`, migration 019): a row per consumer and event whose
 * invocation did not commit, written outside the invocation's transaction (which rolled back, or
 * has not begun), so that a wrapper that turns the failure into a success cannot acknowledge the
 * event without it. The transaction that later applies, parks or acknowledges the event deletes
 * the row (record-message.ts).
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Sql } from '../../platform/db.ts';

/** What the trace says of one attempt. */
export interface FailureRecord {
  consumer: string;
  /** `metadata.eventId`, or `eventbridge:` and EventBridge's id when the event has none readable. */
  eventId: string;
  /** The deduplication key, when the failure came after it was computed. */
  key: string | undefined;
  /** The whole event, as the function received it. */
  event: EventBridgeEvent<string, unknown>;
  errorName: string;
  errorMessage: string;
  /** The handler failed (not the inbox's own wait or checks): counted in `handler_failures`. */
  handlerFailure?: boolean;
}

/**
 * The `error_name` of an attempt that began under a wrapper passing an AbortSignal and has not
 * reported its outcome (it may never: the wrapper answered for it, or the container froze).
 */
export const UNFINISHED_ATTEMPT = 'InboxAttemptUnfinished';

/**
 * Records an attempt: one more attempt (none when `counted`: the attempt's
 * {@link UNFINISHED_ATTEMPT} row, written before its transaction began, counted it), and its
 * error's name and message. When the event's record shows it applied, parked or acknowledged (a
 * COMMIT that went through although the invocation reported a failure, a concurrent delivery that
 * committed), the trace is deleted instead, and an attempt row is not written: nothing is missing.
 * The delete is `outbox_inbox_forget_failed`'s (migration 026: a consumer's role has no DELETE),
 * called in a materialized CTE the insert reads, so that it runs whichever way the check goes.
 */
export function recordFailure(sql: Sql, r: FailureRecord, counted: boolean) {
  const h = r.handlerFailure ? 1 : 0;
  // Compact: a consumer's Lambda bundle carries this text (test/repo/packages.test.ts bounds it).
  return sql`
with recorded as materialized (
  select exists (select from outbox.inbox_message where consumer = ${r.consumer} and message_key = ${r.key ?? null}
  and event_id = ${r.eventId} and outcome <> 'replaying') as done
), cleared as materialized (
  select done, outbox.outbox_inbox_forget_failed(${r.consumer}, case when done then ${r.eventId}::text end, null) from recorded
)
insert into outbox.inbox_failed as f (consumer, event_id, message_key, event, error_name, error_message, handler_failures)
select ${r.consumer}, ${r.eventId}, ${r.key ?? null}, ${sql.json(r.event as never)}, ${r.errorName}, ${r.errorMessage}, ${h}
from cleared where not done
on conflict (consumer, event_id) do update set
message_key = coalesce(excluded.message_key, f.message_key), event = excluded.event,
error_name = excluded.error_name, error_message = excluded.error_message,
attempts = f.attempts + case when ${counted}::boolean then 0 else 1 end, last_failed_at = now(),
handler_failures = f.handler_failures + ${h}`;
}
