/** Failed inbox events (`inbox_failed`, migration 019), as `outbox inbox failed list` shows them. */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Queryable } from '../../../platform/index.ts';

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
    from inbox_failed
    where consumer = ${consumer}
    order by first_failed_at, event_id
    limit ${limit}`;
}
