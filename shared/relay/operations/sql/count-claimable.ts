/**
 * What the monitor scales the relays out on: the rows a claim could take now, counted up to a
 * bound, and whether the bus is throttling the relays.
 */
import type { Queryable } from '../../../platform/index.ts';
import { claimableNow, holdsBackAggregate, pendingRow } from '../../sql/conditions.ts';
import { deadLetterRow } from './conditions.ts';

/** The figures (int8 as a string). */
export interface DbClaimable {
  claimable: string;
  /**
   * Aggregates of the claimable rows (the first {@link HEADS_SCAN_ROWS}, or `limit` when more)
   * whose head a claim could take now, up to `maxHeads` (null when not asked).
   */
  heads: string | null;
  throttled: boolean;
}

/**
 * Pending rows of outbox_pending_idx's furthest end read for a throttling error, at most. Rows the
 * bus throttled wait out a backoff that grows while the throttling lasts (up to
 * OUTBOX_BACKOFF_MAX_MS), so they sit at that end; rows parked by the claim sit a lease length out.
 */
export const THROTTLE_SCAN_ROWS = 1_000;

/**
 * Claimable rows the head count reads, at least (more when the row count's own bound is higher).
 * The row count stops at `limit`, which is small when `backlogPerRelay` is (4 rows for 4 relays of
 * 1): those first rows of outbox_pending_idx may all be one aggregate's while others wait behind
 * them, and a head count of those rows alone wanted 1 relay for 8 aggregates. 10,000 index entries
 * cost a few milliseconds.
 */
export const HEADS_SCAN_ROWS = 10_000;

/**
 * Counts, up to `limit`, the rows a claim could take now: pending, out of backoff, not leased, and,
 * when `block` (per-aggregate ordering with the `block` policy), not of an aggregate held back by a
 * dead letter (the claim's own test: the aggregate's lowest row that holds it back is a dead letter
 * not discarded). Also says whether the bus is throttling: one of the {@link THROTTLE_SCAN_ROWS}
 * pending rows furthest in the future waits out a backoff after a `ThrottlingException` (or an
 * HTTP 429). Reads at most `limit` rows of outbox_pending_idx and their heap rows, the throttling
 * scan, and under `block` the dead letters (outbox_dead_lettered_idx) with one probe each: the
 * held-back aggregates are found from their dead letters, a hashed set, not with a probe per row
 * (at 3,000,000 rows a probe each passed 15 s).
 */
export async function countClaimable(
  sql: Queryable,
  o: { limit: number; block: boolean; maxHeads?: number },
): Promise<DbClaimable | undefined> {
  // Per-aggregate ordering: only the relay that holds an aggregate's head can send any of its rows,
  // so the rows count for as many relays as they have distinct aggregates whose head (the lowest
  // row that holds the aggregate back) is claimable now, up to maxHeads: one probe of
  // outbox_unfinished_by_aggregate_idx per aggregate until enough are found.
  const heads =
    o.maxHeads === undefined
      ? sql`null::int8`
      : sql`(select count(*) from (
          select from (select distinct s.aggregate_type, s.aggregate_id from s) a
          where (
            select coalesce(dead_lettered_at, published_at) is null and ${claimableNow(sql)}
            from outbox p
            where p.aggregate_type = a.aggregate_type and p.aggregate_id = a.aggregate_id
              and ${holdsBackAggregate(sql, sql.unsafe(o.block ? 'true' : 'false'))}
            order by p.sequence
            limit 1)
          limit ${o.maxHeads}
        ) h)`;
  const notHeldBack = o.block
    ? sql`and (o.aggregate_type, o.aggregate_id) not in (
        select d.aggregate_type, d.aggregate_id from outbox d
        where ${deadLetterRow(sql)} and d.discarded_at is null
          and d.sequence = (
            select p.sequence from outbox p
            where p.aggregate_type = d.aggregate_type and p.aggregate_id = d.aggregate_id
              and ${holdsBackAggregate(sql, sql.unsafe('true'))}
            order by p.sequence
            limit 1))`
    : sql``;
  // One read of the claimable rows serves both counts: the rows up to `limit`, the heads among up to
  // HEADS_SCAN_ROWS (or `limit`, when higher).
  const scan = o.maxHeads === undefined ? o.limit : Math.max(o.limit, HEADS_SCAN_ROWS);
  const [row] = await sql<DbClaimable[]>`
    with s as materialized (
      select o.aggregate_type, o.aggregate_id from outbox o
      where ${pendingRow(sql)} and ${claimableNow(sql)} ${notHeldBack}
      limit ${scan}
    )
    select
      (select count(*) from (select from s limit ${o.limit}) c) as claimable,
      ${heads} as heads,
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
