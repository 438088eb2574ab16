/**
 * Parked inbox events (wait-for-gap, `onGapTimeout: 'park'`): list, mark for replay, discard. One
 * module for the three statements: they share the row type and the selection condition.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Queryable } from '../../../platform/db.ts';

/** A parked record's row (`inbox_message`). */
export interface DbParkedEvent {
  consumer: string;
  event_id: string;
  source: string;
  event_type: string;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  outcome: 'parked' | 'replaying';
  reason: string | null;
  processed_at: Date;
  event: EventBridgeEvent<string, unknown>;
}

/** A consumer's parked records (those being replayed included): these event ids, or all with null. */
function parkedRow(sql: Queryable, consumer: string, eventIds: readonly string[] | null) {
  return sql`consumer = ${consumer} and outcome in ('parked', 'replaying')
      and (${eventIds}::text[] is null or event_id = any(${eventIds}::text[]))`;
}

/** The selected parked records, oldest first, at most `limit`. */
export function selectParked(
  sql: Queryable,
  consumer: string,
  eventIds: readonly string[] | null,
  limit: number,
): Promise<DbParkedEvent[]> {
  return sql<DbParkedEvent[]>`
    select consumer, event_id, source, event_type, aggregate_type, aggregate_id, sequence, outcome,
           reason, processed_at, event
    from outbox.inbox_message
    where ${parkedRow(sql, consumer, eventIds)}
    order by processed_at, event_id
    limit ${limit}`;
}

/** Sets the selected parked records `replaying`; returns them (in no order). */
export function markReplaying(
  sql: Queryable,
  consumer: string,
  eventIds: readonly string[] | null,
): Promise<DbParkedEvent[]> {
  return sql<DbParkedEvent[]>`
    update outbox.inbox_message
    set outcome = 'replaying'
    where ${parkedRow(sql, consumer, eventIds)}
    returning consumer, event_id, source, event_type, aggregate_type, aggregate_id, sequence, outcome,
              reason, processed_at, event`;
}

/**
 * Sets the selected parked records `discarded`, drops the kept event, and prepends the operator's
 * reason to the parking reason.
 * @returns records discarded
 */
export async function discardParkedRows(
  sql: Queryable,
  consumer: string,
  eventIds: readonly string[] | null,
  reason: string,
): Promise<number> {
  const r = await sql`
    update outbox.inbox_message
    set outcome = 'discarded', event = null,
        reason = ${`discarded by an operator: ${reason}`} || coalesce('; parked: ' || reason, '')
    where ${parkedRow(sql, consumer, eventIds)}`;
  return r.count;
}

/**
 * The outcome of one event's inbox record (`processed`, `parked`, `replaying`, `discarded`), or
 * undefined when there is none: what a replay reads back after invoking the consumer.
 */
export async function selectInboxOutcome(
  sql: Queryable,
  consumer: string,
  eventId: string,
): Promise<string | undefined> {
  const [record] = await sql<{ outcome: string }[]>`
    select outcome from outbox.inbox_message where consumer = ${consumer} and event_id = ${eventId}`;
  return record?.outcome;
}
