/** Hands back the rows a failed pass's lease still holds, by id, attempts restored: token-guarded. */
import type { Sql } from '../../platform/index.ts';
import type { LeaseLeftover } from '../lease.ts';
import { pendingRowById } from './conditions.ts';

/**
 * Hands back the rows still held by a lease whose pass failed (a connection lost or a deadline
 * missed mid-pass), returning the attempts the lease spent: a dropped or stalled connection is not
 * the event's fault, and repeated failures must not dead-letter healthy events. Some of these rows
 * may have reached the bus before the failure; they are published again (at least once).
 * @param leftover what the lease still holds (see {@link Lease.leftover}), looked up by primary key:
 *   each row gets back the attempts it had before this lease (a start whose answer never came may
 *   have spent one the pass does not know of). A claim whose answer never came left nothing: it
 *   was rolled back (`claimBatchKept`).
 * @returns how many rows were handed back
 */
export async function abandonLease(sql: Sql, leaseToken: string, leftover: LeaseLeftover): Promise<number> {
  if (leftover.held.length === 0) return 0;
  // least(): never more than the row has, should a writer outside the protocol have lowered it
  const r = await sql`
    update outbox o
    set lease_token = null, lease_expires_at = null, attempts = least(o.attempts, b.attempts)
    from unnest(${leftover.held}::int8[], ${leftover.attemptsBefore}::int4[]) as b(id, attempts)
    where o.id = b.id and o.lease_token = ${leaseToken}::uuid and ${pendingRowById(sql)}`;
  return r.count;
}
