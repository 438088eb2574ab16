/**
 * The per-aggregate counters after a point-in-time restore (docs/operations.md#after-a-point-in-time-restore):
 * count them, and move a batch of them forward. An aggregate's last sequence is `last_sequence +
 * sequence_offset` (migration 014); the advance adds to `sequence_offset` only, as the enqueue
 * functions do, so the trigger that refuses a stale bump of `last_sequence` never fires, and the
 * per-type counts behind `typeSequence` (`type_counts`) move by as much, so that a type's rank
 * stays at most the event's sequence. A type the aggregate had not used at the restore point has
 * no count to move, and would start at 1 again: so every type the database knows for the
 * aggregate's type (from any aggregate's counts and the outbox's rows) gets one, of `by`.
 */
import type { Queryable } from '../../../platform/index.ts';

/** How many counters there are and the highest sequence any has handed out (int8 as text). */
export interface DbCounterTotals {
  total: string;
  highest: string | null;
}

/** Counts the counters and reads the highest sequence handed out. */
export async function countCounters(sql: Queryable): Promise<DbCounterTotals | undefined> {
  const [row] = await sql<DbCounterTotals[]>`
    select count(*) as total, max(last_sequence + sequence_offset)::text as highest
    from outbox_aggregate`;
  return row;
}

/** The event types known for each aggregate type: every counter's per-type counts, and the outbox's rows. */
export async function selectKnownTypes(
  sql: Queryable,
): Promise<{ aggregate_type: string; types: string[] }[]> {
  return sql<{ aggregate_type: string; types: string[] }[]>`
    select t.aggregate_type, pg_catalog.array_agg(t.event_type order by t.event_type) as types
    from (
      select a.aggregate_type, k.key as event_type
      from outbox_aggregate a, pg_catalog.jsonb_object_keys(a.type_counts) as k(key)
      union
      select o.aggregate_type, o.event_type from outbox o
    ) t
    group by t.aggregate_type`;
}

/** A counter's key, the cursor of the advance. */
export interface CounterKey {
  aggregateType: string;
  aggregateId: string;
}

/** What one batch advanced: how many, and the last key in key order (undefined when none). */
export interface DbAdvancedBatch {
  advanced: string;
  last_type: string | null;
  last_id: string | null;
}

/**
 * Within the caller's transaction: waits at most `lockTimeoutMs` for each counter row (a producer's
 * transaction holds its aggregate's row until it commits), so that the advance gives way rather
 * than a producer: Postgres looks for a deadlock only after `deadlock_timeout` (1 s by default),
 * and by then this transaction has given up. Transaction-local (`set_config(…, true)`); the
 * command runs on a connection of its own, so nothing else sees it.
 */
export async function limitLockWait(tx: Queryable, lockTimeoutMs: number): Promise<void> {
  await tx`select pg_catalog.set_config('lock_timeout', ${`${lockTimeoutMs}ms`}, true)`;
}

/**
 * Adds `by` to the next `batchSize` counters after `after` in key order (from the first with
 * `after` undefined), and to each of their per-type counts, a count of 0 for each type of
 * `knownTypes` (aggregate type → event types, as JSON) the counter has none of. Locks the rows in
 * key order, as `outbox_enqueue_many` does.
 */
export async function advanceCounterBatch(
  tx: Queryable,
  by: string,
  knownTypes: string,
  after: CounterKey | undefined,
  batchSize: number,
): Promise<DbAdvancedBatch | undefined> {
  const from = after
    ? tx`where (aggregate_type, aggregate_id) > (${after.aggregateType}::text, ${after.aggregateId}::text)`
    : tx``;
  const [row] = await tx<DbAdvancedBatch[]>`
    with batch as (
      select aggregate_type, aggregate_id from outbox_aggregate
      ${from}
      order by aggregate_type, aggregate_id
      limit ${batchSize}
      for update
    ),
    advanced as (
      update outbox_aggregate a
      set sequence_offset = a.sequence_offset + ${by}::bigint,
          type_counts = (
            select pg_catalog.jsonb_object_agg(t.key, coalesce((a.type_counts ->> t.key)::bigint, 0) + ${by}::bigint)
            from (
              select k from pg_catalog.jsonb_object_keys(a.type_counts) as k
              union
              select k from pg_catalog.jsonb_array_elements_text(
                coalesce((${knownTypes}::text)::jsonb -> a.aggregate_type, '[]'::jsonb)) as k
            ) as t(key))
      from batch b
      where a.aggregate_type = b.aggregate_type and a.aggregate_id = b.aggregate_id
      returning 1
    )
    select (select count(*) from advanced) as advanced, l.aggregate_type as last_type, l.aggregate_id as last_id
    from (select 1) one
    left join lateral (
      select aggregate_type, aggregate_id from batch
      order by aggregate_type desc, aggregate_id desc
      limit 1
    ) l on true`;
  return row;
}
