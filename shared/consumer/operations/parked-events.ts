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
import type { Queryable } from '../../platform/db.ts';
import {
  type DbParkedEvent,
  deleteExpiredChains,
  deleteExpiredFailures,
  deleteExpiredGaps,
  deleteExpiredMessages,
  discardParkedRows,
  markReplaying,
  selectInboxOutcome,
  selectParked,
} from './sql/index.ts';

/**
 * Deletes one batch of the inbox's expired rows, oldest first: records older than the retention
 * (`processed_at`; never a parked event still waiting for an operator), then the per-source order
 * state of migrations 010 to 017 its chain has taken over (`updated_at`), then wait-for-gap rows
 * of events last seen as long ago, then traces of failed events whose last attempt is as old
 * (`inbox_failed`: kept the retention, for an operator to see and act on). One short statement;
 * `prune` calls it until it returns 0.
 *
 * A chain's order state (one row per consumer, aggregate and, with `types`, event type, about 100
 * bytes with its index entry) is kept: forgotten, a quiet chain's next event would wait for a #1
 * it had long applied, and be parked for nothing (issue 33). Keep the retention well above the
 * on-failure destination's (14 days) and any replay you may run.
 * @param retentionSeconds the inbox's retention (OUTBOX_INBOX_RETENTION_DAYS)
 * @returns rows deleted by this batch (≤ batchSize); 0 when nothing is left
 */
export async function pruneInboxBatch(
  sql: Queryable,
  retentionSeconds: number,
  batchSize: number,
): Promise<number> {
  // Records, then chains, then gaps, then failures: prune calls this until it returns 0, so each
  // table's expired rows go before the next table's.
  const records = await deleteExpiredMessages(sql, retentionSeconds, batchSize);
  if (records > 0) return records;
  const chains = await deleteExpiredChains(sql, retentionSeconds, batchSize);
  if (chains > 0) return chains;
  const gaps = await deleteExpiredGaps(sql, retentionSeconds, batchSize);
  if (gaps > 0) return gaps;
  return deleteExpiredFailures(sql, retentionSeconds, batchSize);
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

const toParked = (r: DbParkedEvent): ParkedEvent => ({
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
  const rows = await selectParked(sql, selection.consumer, selection.eventIds ?? null, limit);
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
  const rows = await markReplaying(sql, selection.consumer, selection.eventIds ?? null);
  return inAggregateOrder(
    rows.map(toParked).sort((a, b) => a.parkedAt.getTime() - b.parkedAt.getTime() || a.sequence - b.sequence),
  );
}

/**
 * Keeps each aggregate's events in sequence order, in the places its events take in `events`: an
 * aggregate held by `parkAfterAttempts` parks its later events behind the first in whatever order
 * they arrived (a classic bus may deliver #5 before #4), and its replay must apply them in order.
 */
function inAggregateOrder(events: ParkedEvent[]): ParkedEvent[] {
  const byAggregate = new Map<string, ParkedEvent[]>();
  const keyOf = (e: ParkedEvent) => `${e.aggregateType}\u0000${e.aggregateId}`;
  for (const e of events) byAggregate.set(keyOf(e), [...(byAggregate.get(keyOf(e)) ?? []), e]);
  for (const list of byAggregate.values()) list.sort((a, b) => a.sequence - b.sequence);
  return events.map((e) => byAggregate.get(keyOf(e))?.shift() as ParkedEvent);
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
  return discardParkedRows(sql, selection.consumer, selection.eventIds ?? null, reason);
}

/**
 * The outcome of an event's inbox record after a replay (`processed` once the consumer applied it),
 * or undefined when the record is gone.
 */
export function parkedOutcome(
  sql: Queryable,
  consumer: string,
  eventId: string,
): Promise<string | undefined> {
  return selectInboxOutcome(sql, consumer, eventId);
}
