/** Hands back the rows a failed pass's lease still holds, by id, attempts restored: token-guarded. */
import type { Sql } from '../../platform/index.ts';
import type { LeaseLeftover } from '../lease.ts';
import { pendingRowById } from './conditions.ts';

/**
 * Hands back the rows still held by a lease whose pass failed (a connection lost or a deadline
 * missed mid-pass), returning the attempts the lease spent: a dropped or stalled connection is not
 * the event's fault, and repeated failures must not dead-letter healthy events. Some of these rows
 * may have reached the bus before the failure; they are published again (at least once).
 * A row another transaction holds locked is skipped, never waited for: the hand-back runs before
 * the relay's next claim, which must not wait behind someone else's transaction.
 * @param leftover what the lease still holds (see {@link Lease.leftover}), looked up by primary key:
 *   each row gets back the attempts it had before this lease (a start whose answer never came may
 *   have spent one the pass does not know of). A claim whose answer never came left nothing: it
 *   was rolled back (`claimBatchKept`).
 * @returns the ids handed back
 */
export async function abandonLease(
  sql: Sql,
  leaseToken: string,
  leftover: LeaseLeftover,
): Promise<Set<string>> {
  if (leftover.held.length === 0) return new Set();
  // least(): never more than the row has, should a writer outside the protocol have lowered it
  const rows = await sql<{ id: string }[]>`
    with mine as (
      select l.id from outbox l
      where l.id = any(${leftover.held}::int8[]) and l.lease_token = ${leaseToken}::uuid and ${pendingRowById(sql)}
      for no key update skip locked
    )
    update outbox o
    set lease_token = null, lease_expires_at = null, attempts = least(o.attempts, b.attempts)
    from unnest(${leftover.held}::int8[], ${leftover.attemptsBefore}::int4[]) as b(id, attempts)
    where o.id = b.id and o.id = any(array(select id from mine))
    returning o.id`;
  return new Set(rows.map((r) => r.id));
}
