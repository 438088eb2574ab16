/**
 * Row conditions of the operations' statements, written once. The pending-row condition is the
 * relay's (`relay/sql/conditions.ts`): the same rows, the same partial indexes.
 */
import type { Queryable } from '../../../platform/index.ts';
import { pendingRow } from '../../sql/conditions.ts';

/**
 * A dead letter past its retention that may go: neither published nor holding its aggregate back.
 * One that is not discarded is kept while it may hold back an event of its aggregate: under
 * `block` every event after it waits for an operator to replay or discard it, including events
 * enqueued later, and deleting it would let the claim publish them and leave nothing to replay.
 * Prune does not know the relay's policy, so it keeps a dead letter that is not discarded until
 * its aggregate has moved past it: a later event was enqueued (the per-aggregate counter, which
 * outlives pruned rows, says so: its last sequence is last_sequence + sequence_offset, migration 014) and none of the later events is still to publish. Under
 * `continue` that happens once the events behind it are published; a dead letter that is the last
 * event of its aggregate stays until an operator acts or a later event goes out. `d` is the dead
 * letter's alias; the checks read the counter's primary key and `outbox_unfinished_by_aggregate_idx`.
 * The later events' pending condition is unqualified: it resolves against `outbox n`, the
 * innermost `from outbox`.
 */
export function expiredDeadLetter(sql: Queryable, retentionSeconds: number) {
  return sql`d.dead_lettered_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
    and d.published_at is null
    and (d.discarded_at is not null or (
      exists (
        select from outbox_aggregate a
        where a.aggregate_type = d.aggregate_type and a.aggregate_id = d.aggregate_id
          and a.last_sequence + a.sequence_offset > d.sequence)
      and not exists (
        select from outbox n
        where n.aggregate_type = d.aggregate_type and n.aggregate_id = d.aggregate_id
          and n.sequence > d.sequence and ${pendingRow(sql)})))`;
}

/** A dead letter (discarded or not) that is not published: what the dead-letter operations act on. */
export function deadLetterRow(sql: Queryable) {
  return sql`dead_lettered_at is not null and published_at is null`;
}
