/**
 * Failed inbox events (`inbox_failed`, migration 019): as `outbox inbox failed list` shows them,
 * and as `outbox inbox failed replay` takes them, in each aggregate's order.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Queryable } from '../../../platform/db.ts';

/** A failure trace's row. */
export interface DbFailedEvent {
  consumer: string;
  event_id: string;
  message_key: string | null;
  event: EventBridgeEvent<string, unknown>;
  error_name: string;
  error_message: string;
  attempts: number;
  first_failed_at: Date;
  last_failed_at: Date;
}

/** A consumer's failed events, oldest first (by first failure), at most `limit`. */
export function selectFailed(sql: Queryable, consumer: string, limit: number): Promise<DbFailedEvent[]> {
  return sql<DbFailedEvent[]>`
    select consumer, event_id, message_key, event, error_name, error_message, attempts,
           first_failed_at, last_failed_at
    from outbox.inbox_failed
    where consumer = ${consumer}
    order by first_failed_at, event_id
    limit ${limit}`;
}

/**
 * The failed events a replay takes, in each aggregate's order: by aggregate (type, id, as the
 * event's metadata has them) and `sequence`, so that the events of one chain are invoked in the
 * order the producer numbered them, whatever order they failed in. Only those whose last attempt is
 * older than `settledSeconds` (Lambda's retries are over), and with `eventIds` only those.
 */
export function selectFailedForReplay(
  sql: Queryable,
  consumer: string,
  settledSeconds: number,
  eventIds: readonly string[] | undefined,
): Promise<DbFailedEvent[]> {
  return sql<DbFailedEvent[]>`
    select consumer, event_id, message_key, event, error_name, error_message, attempts,
           first_failed_at, last_failed_at
    from outbox.inbox_failed
    where consumer = ${consumer}
      and last_failed_at < now() - pg_catalog.make_interval(secs => ${settledSeconds})
      and (${eventIds === undefined}::boolean or event_id = any(${eventIds ?? []}::text[]))
    order by event #>> '{detail,metadata,aggregateType}', event #>> '{detail,metadata,aggregateId}',
             -- a malformed sequence (the envelope errors are traced too) sorts last, not fails
             case when event #>> '{detail,metadata,sequence}' ~ '^[0-9]{1,19}$'
                  then (event #>> '{detail,metadata,sequence}')::numeric end nulls last,
             first_failed_at, event_id`;
}

/** Whether the consumer still has a failure trace for the event (a replay that applied it has none). */
export async function hasFailureTrace(sql: Queryable, consumer: string, eventId: string): Promise<boolean> {
  const rows =
    await sql`select 1 from outbox.inbox_failed where consumer = ${consumer} and event_id = ${eventId}`;
  return rows.length > 0;
}
