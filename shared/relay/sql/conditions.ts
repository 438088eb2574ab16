/**
 * Row conditions that several relay statements share, written once. Each equals the predicate of
 * the partial indexes that serve it (test/relay/relay-sql.test.ts compares them with `pg_indexes`), but
 * {@link pendingRowById}, which must not match one (it says why): a
 * statement whose condition drifted from its index's predicate would quietly stop using the index
 * and scan the table's whole published history.
 *
 * The columns are unqualified on purpose: SQL resolves them against the innermost `from outbox`
 * around the place the fragment is used, so one text serves every alias.
 */
import type { Queryable } from '../../platform/index.ts';

/**
 * A row still to publish: neither published nor dead-lettered. The predicate of
 * `outbox_pending_idx`.
 */
export function pendingRow(sql: Queryable) {
  return sql`published_at is null and dead_lettered_at is null`;
}

/**
 * A row a claim may take now: its backoff (or park) is over and no live lease holds it. With
 * {@link pendingRow}, what the claim's head walk reads from `outbox_pending_idx`
 * (`available_at <= now()` is its range); the lease test reads the heap.
 */
export function claimableNow(sql: Queryable) {
  return sql`available_at <= now() and (lease_expires_at is null or lease_expires_at <= now())`;
}

/**
 * A row not published, dead letters included (they may still hold back their aggregate). The
 * predicate of `outbox_unfinished_by_aggregate_idx`.
 */
export function unpublishedRow(sql: Queryable) {
  return sql`published_at is null`;
}

/**
 * The same test as {@link pendingRow}, for rows a statement has already found by id
 * (`id = any(…)`), written so that it does not match `outbox_pending_idx`'s predicate: when it
 * does, the planner may serve `id = any(…)` from that index (its predicate implies the clause, and
 * it is smaller than the primary key), which means reading every pending row to find a few hundred,
 * a cost that grows with the backlog (without statistics, as on a table just filled, 8,000 pending
 * rows made a claim read 24,600 rows: test/relay/relay-park.test.ts). By id, the primary key reads one
 * entry per row.
 */
export function pendingRowById(sql: Queryable) {
  return sql`coalesce(published_at, dead_lettered_at) is null`;
}

/**
 * An unpublished row that keeps the rest of its aggregate waiting: not dead-lettered, or, when
 * `block` (a boolean fragment: the `block` dead-letter policy) is true, a dead letter not yet
 * discarded. The lowest such row of an aggregate is its head (or, under `block`, the dead letter
 * that holds it back). For the lookups by aggregate, which `outbox_unfinished_by_aggregate_idx`
 * serves (its predicate is {@link unpublishedRow}, written as such), with the dead-letter test
 * written so that it does not imply `outbox_pending_idx`'s predicate as well (`coalesce`, as in
 * {@link pendingRowById}): when it does, the planner may find an aggregate's lowest row by
 * reading every pending row in (available_at, id) order and keeping that aggregate's, one
 * pending row estimated, the whole backlog read. With statistics taken when almost nothing was
 * pending (the steady state autoanalyze samples), a claim read 1.5 million rows for 100 heads
 * with 15,000 pending (test/relay/claim-plan.test.ts); in the 5M soak, claims took seconds until they
 * ran out of time.
 */
export function holdsBackAggregate(sql: Queryable, block: ReturnType<Queryable['unsafe']>) {
  return sql`published_at is null
    and (coalesce(dead_lettered_at, published_at) is null or (${block}::boolean and discarded_at is null))`;
}
