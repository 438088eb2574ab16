/** Extends a live pass's lease on the rows it still holds: one statement, token-guarded. */
import type { Sql } from '../../platform/index.ts';

/**
 * Pushes the lease of rows still held by a pass `leaseSeconds` past the database's `now()`, so a
 * slow but live pass keeps them while a short lease still frees a dead relay's rows quickly.
 * Goes by primary key (the pass knows its ids), never by scanning for the token.
 * @param ids the rows the pass still holds
 * @returns the ids this lease still owned and renewed; any other was lost to another relay
 */
export async function renewLease(
  sql: Sql,
  leaseToken: string,
  ids: readonly string[],
  leaseSeconds: number,
): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await sql<{ id: string }[]>`
    update outbox
    set lease_expires_at = now() + pg_catalog.make_interval(secs => ${leaseSeconds})
    where id = any(${ids}::int8[]) and lease_token = ${leaseToken}::uuid
    returning id
  `;
  return new Set(rows.map((r) => r.id));
}
