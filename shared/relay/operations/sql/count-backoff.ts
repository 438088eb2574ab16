/** The rows waiting out a backoff after a failed attempt, and the errors of the rows being retried, for `outbox status`. */
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

/** One error that pending rows' last attempt failed with, and how many (int8s as strings). */
export interface DbLastError {
  error: string;
  n: string;
  /** Pending rows with an error recorded, all errors together. */
  total: string;
}

/**
 * The errors the pending rows' last attempts failed with (`last_error`, kept while the relay
 * retries them, in backoff or leased again), most rows first, at most `limit`; each row carries
 * the total of pending rows with an error. Reads the pending rows (outbox_pending_idx) and their
 * heap rows: an operator's statement, not the monitor's.
 */
export async function selectLastErrors(sql: Queryable, limit: number): Promise<DbLastError[]> {
  return sql<DbLastError[]>`
    select error, n::text, total::text from (
      select last_error as error, count(*) as n, sum(count(*)) over () as total
      from outbox
      where ${pendingRow(sql)} and last_error is not null
      group by last_error
    ) e
    order by e.n desc, e.error
    limit ${limit}
  `;
}
