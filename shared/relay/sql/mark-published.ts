/** Marks rows published: one statement per group, guarded by the lease token. */
import type { Sql } from '../../platform/index.ts';

/**
 * Marks rows published.
 * @param ids row ids (int8 as strings)
 * @returns how many rows this lease still owned and marked; the rest were lost to another relay
 */
export async function markPublished(sql: Sql, leaseToken: string, ids: readonly string[]): Promise<number> {
  if (ids.length === 0) return 0;
  const result = await sql`
    update outbox
    set published_at = now(), lease_token = null, lease_expires_at = null, last_error = null
    where id = any(${ids}::int8[]) and lease_token = ${leaseToken}::uuid
  `;
  return result.count;
}
