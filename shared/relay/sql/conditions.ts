/**
 * Row conditions that several relay statements share, written once. Each equals the predicate of
 * the partial indexes that serve it (test/relay-sql.test.ts compares them with `pg_indexes`), but
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
 * rows made a claim read 24,600 rows: test/relay-park.test.ts). By id, the primary key reads one
 * entry per row.
 */
export function pendingRowById(sql: Queryable) {
  return sql`coalesce(published_at, dead_lettered_at) is null`;
}
