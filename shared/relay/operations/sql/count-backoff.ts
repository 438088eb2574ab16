/** The rows waiting out a backoff after a failed attempt, for `outbox status`. */
import type { Queryable } from '../../../platform/index.ts';
import { pendingRow } from '../../sql/conditions.ts';

/** The rows in backoff (int8 as a string). */
export interface DbBackoffCount {
  in_backoff: string;
}

/**
 * Counts the pending rows waiting out a backoff after a failed attempt: not leased, an error
 * recorded, `available_at` still ahead. Reads the range of outbox_pending_idx past now() (rows in
 * backoff, and the rows the claim parked a lease length out) and their heap rows.
 */
export async function countInBackoff(sql: Queryable): Promise<DbBackoffCount | undefined> {
  const [row] = await sql<DbBackoffCount[]>`
    select count(*) as in_backoff from outbox
    where ${pendingRow(sql)} and available_at > now() and last_error is not null
      and (lease_expires_at is null or lease_expires_at <= now())
  `;
  return row;
}
