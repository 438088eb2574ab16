/**
 * One batch of pruning the inbox, one statement per table: records, chains' order state,
 * wait-for-gap rows, and failed events' traces. Each repeats its condition on the DELETE itself: Postgres re-checks only the
 * outer WHERE against a row that changed while the DELETE waited for it (a chain a consumer just
 * moved on, an event an operator just asked to replay), which must then stay.
 */
import type { Queryable } from '../../../platform/db.ts';

/**
 * Deletes up to `batchSize` inbox records older than the retention (seconds, by `processed_at`),
 * oldest first; never a parked event still waiting for an operator.
 * @returns rows deleted
 */
export async function deleteExpiredMessages(sql: Queryable, retentionSeconds: number, batchSize: number) {
  const records = await sql`
    delete from outbox.inbox_message m
    using (
      select consumer, message_key from outbox.inbox_message
      where processed_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
        and outcome not in ('parked', 'replaying')
      order by processed_at
      limit ${batchSize}
    ) old
    where m.consumer = old.consumer and m.message_key = old.message_key
      and m.processed_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
      and m.outcome not in ('parked', 'replaying')`;
  return records.count;
}

/**
 * The per-source order-state rows of migrations 010 to 017 (alias `s`) untouched for longer than
 * the retention (seconds, by `updated_at`) whose chain's own row (source '') holds a position at
 * least theirs: they say nothing it does not. A chain's own row is never pruned: a quiet chain
 * whose state was forgotten would expect its #1 again, and park its next event for nothing.
 */
export function supersededChains(sql: Queryable, retentionSeconds: number) {
  return sql`s.source <> ''
    and s.updated_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
    and exists (select from outbox.inbox_aggregate c
                where c.consumer = s.consumer and c.aggregate_type = s.aggregate_type
                  and c.aggregate_id = s.aggregate_id and c.source = '' and c.chain = s.chain
                  and c.last_sequence >= s.last_sequence)`;
}

/**
 * Deletes up to `batchSize` of the {@link supersededChains}, oldest first.
 * @returns rows deleted
 */
export async function deleteExpiredChains(sql: Queryable, retentionSeconds: number, batchSize: number) {
  const chains = await sql`
    delete from outbox.inbox_aggregate a
    using (
      select s.consumer, s.aggregate_type, s.aggregate_id, s.source, s.chain from outbox.inbox_aggregate s
      where ${supersededChains(sql, retentionSeconds)}
      order by s.updated_at
      limit ${batchSize}
    ) old
    where (a.consumer, a.aggregate_type, a.aggregate_id, a.source, a.chain)
          = (old.consumer, old.aggregate_type, old.aggregate_id, old.source, old.chain)
      and a.updated_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})`;
  return chains.count;
}

/**
 * Deletes up to `batchSize` wait-for-gap rows of events last seen longer ago than the retention
 * (seconds), oldest first.
 * @returns rows deleted
 */
export async function deleteExpiredGaps(sql: Queryable, retentionSeconds: number, batchSize: number) {
  const gaps = await sql`
    delete from outbox.inbox_gap g
    using (
      select consumer, message_key from outbox.inbox_gap
      where last_seen_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
      order by last_seen_at
      limit ${batchSize}
    ) old
    where g.consumer = old.consumer and g.message_key = old.message_key
      and g.last_seen_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})`;
  return gaps.count;
}

/**
 * Deletes up to `batchSize` traces of failed events (`inbox_failed`) whose last attempt is older
 * than the retention (seconds), oldest first: kept as long as the records, so that an operator has
 * the retention to see them (InboxFailedCount is alarmed on) and act.
 * @returns rows deleted
 */
export async function deleteExpiredFailures(sql: Queryable, retentionSeconds: number, batchSize: number) {
  const failures = await sql`
    delete from outbox.inbox_failed f
    using (
      select consumer, event_id from outbox.inbox_failed
      where last_failed_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
      order by last_failed_at
      limit ${batchSize}
    ) old
    where f.consumer = old.consumer and f.event_id = old.event_id
      and f.last_failed_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})`;
  return failures.count;
}
