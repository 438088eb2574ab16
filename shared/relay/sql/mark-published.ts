/** Marks rows published: one statement per group, guarded by the lease token. */
import type { Sql } from '../../platform/index.ts';

/**
 * What becomes of a published row: `keep` sets `published_at` (the monitor prunes it after
 * `OUTBOX_PUBLISHED_RETENTION_DAYS`); `delete` removes it at once, for
 * `OUTBOX_PUBLISHED_RETENTION_DAYS=0` (docs/configuration.md#no-published-history).
 *
 * Why a DELETE costs less than the mark it replaces (bench section db-cost): the mark changes
 * `published_at`, a column of the partial indexes' predicates, so it is never a HOT update: it
 * writes a whole new row version and an entry in every index (about 430 B of WAL per event), and
 * the prune later writes the delete as well (about 380 B). A DELETE writes only the delete record
 * (about 60 B); what it leaves, the dead row and its index entries, is the same VACUUM work a
 * pruned row leaves. Nothing reads a published row but the operator's queries: the relay's claim
 * reads unpublished rows only, order needs no published row (sequences are counted in
 * `outbox_aggregate`), and idempotency keys live in `outbox_idempotency_key`.
 */
export type PublishedHistory = 'keep' | 'delete';

/**
 * Marks rows published, or deletes them (`history: 'delete'`): only the rows this lease still
 * holds (`lease_token`), so a relay whose lease expired touches nothing of the new owner's.
 * @param ids row ids (int8 as strings)
 * @returns how many rows this lease still owned and marked (or deleted); the rest were lost to another relay
 * @throws the database's insufficient_privilege (42501) when deleting as a role without DELETE on
 *   the outbox (`createRelay`'s check says so before the first claim)
 */
export async function markPublished(
  sql: Sql,
  leaseToken: string,
  ids: readonly string[],
  history: PublishedHistory = 'keep',
): Promise<number> {
  if (ids.length === 0) return 0;
  const result =
    history === 'delete'
      ? await sql`
          delete from outbox
          where id = any(${ids}::int8[]) and lease_token = ${leaseToken}::uuid`
      : await sql`
          update outbox
          set published_at = now(), lease_token = null, lease_expires_at = null, last_error = null
          where id = any(${ids}::int8[]) and lease_token = ${leaseToken}::uuid
        `;
  return result.count;
}
