/**
 * What the monitor scales the relays out on: the rows a claim could take now, counted up to a
 * bound, and whether the bus is throttling the relays.
 */
import type { Queryable } from '../../platform/index.ts';
import { claimableNow, holdsBackAggregate, pendingRow } from '../../relay/sql/conditions.ts';

/** The figures (int8 as a string). */
export interface DbClaimable {
  claimable: string;
  throttled: boolean;
}

/**
 * Pending rows of outbox_pending_idx's furthest end read for a throttling error, at most. Rows the
 * bus throttled wait out a backoff that grows while the throttling lasts (up to
 * OUTBOX_BACKOFF_MAX_MS), so they sit at that end; rows parked by the claim sit a lease length out.
 */
export const THROTTLE_SCAN_ROWS = 1_000;

/**
 * Counts, up to `limit`, the rows a claim could take now: pending, out of backoff, not leased, and,
 * when `block` (per-aggregate ordering with the `block` policy), not behind a dead letter that
 * holds their aggregate back (the claim's own test: the aggregate's lowest row that holds it back
 * is a dead letter). Also says whether the bus is throttling: one of the {@link THROTTLE_SCAN_ROWS}
 * pending rows furthest in the future waits out a backoff after a `ThrottlingException` (or an
 * HTTP 429). Reads at most `limit` rows of outbox_pending_idx and their heap rows (and, under
 * `block`, one probe of outbox_unfinished_by_aggregate_idx each), plus the throttling scan.
 */
export async function countClaimable(
  sql: Queryable,
  o: { limit: number; block: boolean },
): Promise<DbClaimable | undefined> {
  const heldBack = o.block
    ? sql`and not coalesce((
        select p.dead_lettered_at is not null from outbox p
        where p.aggregate_type = o.aggregate_type and p.aggregate_id = o.aggregate_id
          and ${holdsBackAggregate(sql, sql.unsafe('true'))}
        order by p.sequence
        limit 1), false)`
    : sql``;
  const [row] = await sql<DbClaimable[]>`
    select
      (select count(*) from (
        select from outbox o
        where ${pendingRow(sql)} and ${claimableNow(sql)} ${heldBack}
        limit ${o.limit}
      ) c) as claimable,
      exists (
        select from (
          select t.last_error from outbox t
          where ${pendingRow(sql)} and t.available_at > now()
          order by t.available_at desc, t.id desc
          limit ${THROTTLE_SCAN_ROWS}
        ) f
        where f.last_error like 'ThrottlingException:%' or f.last_error like '%(HTTP 429)'
      ) as throttled
  `;
  return row;
}
