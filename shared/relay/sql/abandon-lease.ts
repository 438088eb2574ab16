/** Hands back every row still held by a failed pass's lease, attempt returned: token-guarded. */
import type { Sql } from '../../platform/index.ts';
import { pendingRow } from './conditions.ts';

/**
 * Hands back every row still held by a lease whose pass failed (a connection lost or a deadline
 * missed mid-pass), returning the attempt counted at claim: a dropped or stalled connection is not
 * the event's fault, and repeated failures must not dead-letter healthy events. Some of these rows
 * may have reached the bus before the failure; they are published again (at least once).
 * @param ids the rows the pass still held, when it knew them (looked up by primary key); without
 *   them (the claim's answer never came), the pending rows are searched for the token
 * @returns how many rows were handed back
 */
export async function abandonLease(sql: Sql, leaseToken: string, ids?: readonly string[]): Promise<number> {
  if (ids?.length === 0) return 0;
  const r = await sql`
    update outbox
    set lease_token = null, lease_expires_at = null, attempts = greatest(attempts - 1, 0)
    where lease_token = ${leaseToken}::uuid and ${pendingRow(sql)}
      ${ids ? sql`and id = any(${ids}::int8[])` : sql``}`;
  return r.count;
}
