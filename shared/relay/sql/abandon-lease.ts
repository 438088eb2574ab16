/** Hands back every row still held by a failed pass's lease, attempts returned: token-guarded. */
import type { Sql } from '../../platform/index.ts';
import type { LeaseLeftover } from '../lease.ts';
import { pendingRow, pendingRowById } from './conditions.ts';

/**
 * Hands back every row still held by a lease whose pass failed (a connection lost or a deadline
 * missed mid-pass), returning the attempts the lease spent: a dropped or stalled connection is not
 * the event's fault, and repeated failures must not dead-letter healthy events. Some of these rows
 * may have reached the bus before the failure; they are published again (at least once).
 * @param leftover what the lease still holds (see {@link Lease.leftover}): the held rows, looked up
 *   by primary key, each given back the attempts it had before this lease (a start whose answer
 *   never came may have spent one, unknown to the pass); or, when the claim's answer never
 *   came, the claim's ordering, and the pending rows are searched for the token. The attempt is then
 *   returned on the rows the claim spent it on: every row with ordering `none`, else the lowest
 *   sequence of each aggregate (its head; the successors spent nothing)
 * @returns how many rows were handed back
 */
export async function abandonLease(
  sql: Sql,
  leaseToken: string,
  leftover: LeaseLeftover = { ordering: 'aggregate' },
): Promise<number> {
  if ('held' in leftover) {
    if (leftover.held.length === 0) return 0;
    // least(): never more than the row has, should a writer outside the protocol have lowered it
    const r = await sql`
      update outbox o
      set lease_token = null, lease_expires_at = null, attempts = least(o.attempts, b.attempts)
      from unnest(${leftover.held}::int8[], ${leftover.attemptsBefore}::int4[]) as b(id, attempts)
      where o.id = b.id and o.lease_token = ${leaseToken}::uuid and ${pendingRowById(sql)}`;
    return r.count;
  }
  const r = await sql`
    update outbox o
    set lease_token = null, lease_expires_at = null,
        attempts = greatest(o.attempts - case when ${leftover.ordering === 'none'}::boolean or o.sequence = (
          select min(s.sequence) from outbox s
          where s.lease_token = ${leaseToken}::uuid and s.published_at is null
            and s.aggregate_type = o.aggregate_type and s.aggregate_id = o.aggregate_id
        ) then 1 else 0 end, 0)
    where o.lease_token = ${leaseToken}::uuid and ${pendingRow(sql)}`;
  return r.count;
}
