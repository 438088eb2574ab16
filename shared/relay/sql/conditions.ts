/**
 * Row conditions that several relay statements share, written once. Each equals the predicate of
 * the partial indexes that serve it (test/relay-sql.test.ts compares them with `pg_indexes`): a
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
