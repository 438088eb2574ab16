/**
 * Records an event for a consumer in `inbox_message`, unless the consumer has a record under its
 * key, and deletes the event's failure trace (`inbox_failed`) in the same statement.
 */
import type { Tx } from '../../platform/db.ts';

/** What the inbox records of a delivered event (the columns of `inbox_message` it sets on arrival). */
export interface MessageRecord {
  consumer: string;
  /** The deduplication key: `metadata.eventId` or the consumer's business key. */
  key: string;
  eventId: string;
  source: string;
  type: string;
  aggregateType: string;
  aggregateId: string;
  sequence: bigint;
  /** The outbox that numbered it (`metadata.outboxId`), undefined when the event names none. */
  outboxId: string | undefined;
}

/**
 * Inserts the record. A concurrent delivery of the same event waits here on the first one's
 * uncommitted row, then sees it: only one of them goes on.
 *
 * Every transaction of the inbox that commits begins with this statement, whatever it then decides
 * (applied, duplicate, stale, parked, replayed), so it also deletes the event's failure trace, and
 * with a business key the traces of the other events of that key (the fact is recorded now: they
 * would be duplicates): a trace goes if and only if that transaction commits, and the hot path
 * gains no round trip (two index probes that find nothing when nothing failed). The traces go
 * through `outbox_inbox_forget_failed` (migration 026: a consumer's role has no DELETE on the inbox
 * tables, which would let it lock them), called only when the probes find one: its check of the
 * caller's policy costs ~70 µs of database CPU, more than the rest of the statement.
 * @returns false when a record with the same key existed (nothing was written)
 */
export async function recordMessage(tx: Tx, r: MessageRecord): Promise<boolean> {
  const inserted = await tx`
    insert into outbox.inbox_message (consumer, message_key, event_id, source, event_type, aggregate_type, aggregate_id, sequence, outbox_id)
    select ${r.consumer}, ${r.key}, ${r.eventId}, ${r.source}, ${r.type}, ${r.aggregateType}, ${r.aggregateId}, ${String(r.sequence)}::bigint,
           ${r.outboxId ?? null}::uuid
    from (select case when exists (select from outbox.inbox_failed where consumer = ${r.consumer}
      and (event_id = ${r.eventId} or message_key = ${r.key}))
      then outbox.outbox_inbox_forget_failed(${r.consumer}, ${r.eventId}, ${r.key}) end) as traced
    on conflict do nothing
    returning 1`;
  return inserted.length > 0;
}
