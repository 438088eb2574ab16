/**
 * The inbox's operations: what the monitor prunes, and what an operator does with parked events
 * (`outbox inbox parked list|replay|discard`).
 *
 * A parked event (wait-for-gap, `onGapTimeout: 'park'`) is an inbox record with outcome `parked`
 * that holds the whole EventBridge event. Replaying it sets the outcome to `replaying` and hands the
 * event back to the consumer's function: the inbox applies its next delivery once (arrival
 * `replayed`) and records it `processed`. Discarding it sets `discarded`, with the operator's
 * reason; its deliveries are acknowledged as duplicates from then on. Both are updates of the
 * record, which the consumer's own database role may do; nothing here deletes a record.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Queryable } from '../platform/index.ts';

/**
 * Deletes one batch of the inbox's expired rows, oldest first: records older than the retention
 * (`processed_at`; never a parked event still waiting for an operator), then the order state of
 * chains not touched for as long (`updated_at`), then wait-for-gap rows of events last seen as
 * long ago. One short statement; `prune` calls it until it returns 0.
 *
 * A chain whose state is pruned is forgotten: its next event is handled as the first one seen
 * (wait-for-gap expects its #1 again, waits, and then applies or parks it). Keep the retention well
 * above the on-failure destination's (14 days) and any replay you may run.
 * @param retentionSeconds the inbox's retention (OUTBOX_INBOX_RETENTION_DAYS)
 * @returns rows deleted by this batch (≤ batchSize); 0 when nothing is left
 */
export async function pruneInboxBatch(
  sql: Queryable,
  retentionSeconds: number,
  batchSize: number,
): Promise<number> {
  // The conditions are repeated on each DELETE: Postgres re-checks only the outer WHERE against a
  // row that changed while the DELETE waited for it (a chain a consumer just moved on, an event
  // an operator just asked to replay), which must then stay.
  const records = await sql`
    delete from inbox_message m
    using (
      select consumer, message_key from inbox_message
      where processed_at < now() - make_interval(secs => ${retentionSeconds})
        and outcome not in ('parked', 'replaying')
      order by processed_at
      limit ${batchSize}
    ) old
    where m.consumer = old.consumer and m.message_key = old.message_key
      and m.processed_at < now() - make_interval(secs => ${retentionSeconds})
      and m.outcome not in ('parked', 'replaying')`;
  if (records.count > 0) return records.count;
  const chains = await sql`
    delete from inbox_aggregate a
    using (
      select consumer, aggregate_type, aggregate_id, source, chain from inbox_aggregate
      where updated_at < now() - make_interval(secs => ${retentionSeconds})
      order by updated_at
      limit ${batchSize}
    ) old
    where (a.consumer, a.aggregate_type, a.aggregate_id, a.source, a.chain)
          = (old.consumer, old.aggregate_type, old.aggregate_id, old.source, old.chain)
      and a.updated_at < now() - make_interval(secs => ${retentionSeconds})`;
  if (chains.count > 0) return chains.count;
  const gaps = await sql`
    delete from inbox_gap g
    using (
      select consumer, message_key from inbox_gap
      where last_seen_at < now() - make_interval(secs => ${retentionSeconds})
      order by last_seen_at
      limit ${batchSize}
    ) old
    where g.consumer = old.consumer and g.message_key = old.message_key
      and g.last_seen_at < now() - make_interval(secs => ${retentionSeconds})`;
  return gaps.count;
}

/** A parked event, as `outbox inbox parked list` shows it. */
export interface ParkedEvent {
  consumer: string;
  eventId: string;
  source: string;
  /** The DetailType. */
  type: string;
  aggregateType: string;
  aggregateId: string;
  sequence: number;
  /** `parked`, or `replaying` once an operator asked for it to be re-applied. */
  state: 'parked' | 'replaying';
  /** Why it was parked (which events of its chain were missing, after how long). */
  reason: string;
  /** When it was parked (database clock). */
  parkedAt: Date;
  /** The EventBridge event as the consumer's function received it: what a replay invokes it with. */
  event: EventBridgeEvent<string, unknown>;
}

interface ParkedRow {
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

const toParked = (r: ParkedRow): ParkedEvent => ({
  consumer: r.consumer,
  eventId: r.event_id,
  source: r.source,
  type: r.event_type,
  aggregateType: r.aggregate_type,
  aggregateId: r.aggregate_id,
  sequence: Number(r.sequence),
  state: r.outcome,
  reason: r.reason ?? '',
  parkedAt: r.processed_at,
  event: r.event,
});

/** Which parked events of a consumer: these event ids, or all of them. */
export interface ParkedSelection {
  consumer: string;
  /** Event ids (`metadata.eventId`); omit for every parked event of the consumer. */
  eventIds?: string[];
}

/**
 * A consumer's parked events (and those being replayed), oldest first.
 * @param limit at most this many
 */
export async function listParked(
  sql: Queryable,
  selection: ParkedSelection,
  limit = 100,
): Promise<ParkedEvent[]> {
  const rows = await sql<ParkedRow[]>`
    select consumer, event_id, source, event_type, aggregate_type, aggregate_id, sequence, outcome,
           reason, processed_at, event
    from inbox_message
    where consumer = ${selection.consumer} and outcome in ('parked', 'replaying')
      and (${selection.eventIds ?? null}::text[] is null or event_id = any(${selection.eventIds ?? null}::text[]))
    order by processed_at, event_id
    limit ${limit}`;
  return rows.map(toParked);
}

/**
 * Marks parked events for re-application (`replaying`): the consumer's inbox applies each one's
 * next delivery once. The caller then delivers them (invokes the function with `event`). Events
 * already `replaying` are returned again, so that a replay whose delivery failed can be run again.
 * @returns the events marked, oldest first
 */
export async function markParkedForReplay(
  sql: Queryable,
  selection: ParkedSelection,
): Promise<ParkedEvent[]> {
  const rows = await sql<ParkedRow[]>`
    update inbox_message
    set outcome = 'replaying'
    where consumer = ${selection.consumer} and outcome in ('parked', 'replaying')
      and (${selection.eventIds ?? null}::text[] is null or event_id = any(${selection.eventIds ?? null}::text[]))
    returning consumer, event_id, source, event_type, aggregate_type, aggregate_id, sequence, outcome,
              reason, processed_at, event`;
  return rows
    .map(toParked)
    .sort((a, b) => a.parkedAt.getTime() - b.parkedAt.getTime() || a.sequence - b.sequence);
}

/**
 * Discards parked events: they are never applied; the record stays (outcome `discarded`, the
 * operator's reason prepended to the parking reason), so that their deliveries are acknowledged as
 * duplicates until the record is pruned.
 * @returns how many were discarded
 */
export async function discardParked(
  sql: Queryable,
  selection: ParkedSelection,
  reason: string,
): Promise<number> {
  const r = await sql`
    update inbox_message
    set outcome = 'discarded', event = null,
        reason = ${`discarded by an operator: ${reason}`} || coalesce('; parked: ' || reason, '')
    where consumer = ${selection.consumer} and outcome in ('parked', 'replaying')
      and (${selection.eventIds ?? null}::text[] is null or event_id = any(${selection.eventIds ?? null}::text[]))`;
  return r.count;
}
