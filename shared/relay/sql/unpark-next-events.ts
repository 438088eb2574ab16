/** Makes the next event of each settled aggregate claimable at once (undoing the claim's park). */
import type { Sql } from '../../platform/index.ts';
import { pendingRowById, unpublishedRow } from './conditions.ts';

/**
 * Makes the next unfinished event of each aggregate claimable now, undoing the park a claim put
 * on it, once the aggregate's claimed events are all settled. Only a parked row is touched: an
 * unparked next event may be in the middle of being claimed by another relay, and writing it then
 * would make that claim skip it (the row changed under its lock).
 *
 * And only a park: once this group was marked published, another relay may have claimed the next
 * event and put it in backoff after a failed attempt, which must stand (undoing it would retry at
 * once, and a poison event would burn its attempts in a tight loop). A row in backoff carries the
 * failure in `last_error` (every retry records one; only publication or a replay clears it), and a
 * row leased by another relay is that relay's. A parked row that failed long ago is left parked
 * too: it waits out the park, one lease length at most.
 * @param aggregates (aggregateType, aggregateId) pairs whose claimed group completed
 */
export async function unparkNextEvents(
  sql: Sql,
  aggregates: readonly { aggregateType: string; aggregateId: string }[],
): Promise<void> {
  if (aggregates.length === 0) return;
  await sql`
    update outbox o
    set available_at = least(o.available_at, now())
    where o.id = any(array(
      select (
        select n.id from outbox n
        -- through outbox_unfinished_by_aggregate_idx: the pending test written so that it does not
        -- imply outbox_pending_idx's predicate, which the planner, with statistics that saw almost
        -- nothing pending, preferred, reading the whole backlog for each aggregate (1.5 million rows
        -- for 100 aggregates with 15,000 pending: test/relay/claim-plan.test.ts)
        where n.aggregate_type = a.t and n.aggregate_id = a.i
          and ${unpublishedRow(sql)} and ${pendingRowById(sql)}
        order by n.sequence
        limit 1
      )
      from unnest(${aggregates.map((a) => a.aggregateType)}::text[], ${aggregates.map((a) => a.aggregateId)}::text[]) as a(t, i)
    ))
      and o.available_at > now()
      and o.last_error is null
      and (o.lease_expires_at is null or o.lease_expires_at <= now())
  `;
}
