/** The rows held back behind a dead letter (the `block` policy), for `outbox status`. */
import type { Queryable } from '../../../platform/index.ts';
import { holdsBackAggregate, pendingRowById, unpublishedRow } from '../../sql/conditions.ts';
import { deadLetterRow } from './conditions.ts';

/** A dead letter that holds its aggregate back, and how many pending rows wait behind it (int8 as strings). */
export interface DbHoldingDeadLetter {
  id: string;
  event_id: string;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  behind: string;
}

/**
 * The dead letters that hold their aggregate back under the `block` policy, with the pending rows
 * behind each: a dead letter not discarded that is its aggregate's lowest row holding it back (the
 * claim's own test, as in count-claimable.ts). Under `continue` the relay publishes the rows behind
 * it anyway, so they are counted there only until the next pass. Read from the dead letters
 * (outbox_dead_lettered_idx), one probe each of outbox_unfinished_by_aggregate_idx for the head and
 * one range of it for the rows behind: the cost grows with the dead letters and the rows held back,
 * not with the backlog. Most rows behind first.
 */
export async function selectHoldingDeadLetters(sql: Queryable): Promise<DbHoldingDeadLetter[]> {
  return sql<DbHoldingDeadLetter[]>`
    select h.id, h.event_id, h.aggregate_type, h.aggregate_id, h.sequence, h.behind
    from (
      select d.id, d.event_id, d.aggregate_type, d.aggregate_id, d.sequence,
        (select count(*) from outbox n
         where n.aggregate_type = d.aggregate_type and n.aggregate_id = d.aggregate_id
           and n.sequence > d.sequence and ${unpublishedRow(sql)} and ${pendingRowById(sql)}) as behind
      from outbox d
      where ${deadLetterRow(sql)} and d.discarded_at is null
        and d.sequence = (
          select p.sequence from outbox p
          where p.aggregate_type = d.aggregate_type and p.aggregate_id = d.aggregate_id
            and ${holdsBackAggregate(sql, sql.unsafe('true'))}
          order by p.sequence
          limit 1)
    ) h
    where h.behind > 0
    order by h.behind desc, h.id
  `;
}
