/** Hands back claimed rows that were never sent, with their attempt: one statement, token-guarded. */
import type { Sql } from '../../platform/index.ts';

/**
 * Hands back rows that were claimed but never sent (their aggregate's earlier event failed, or the
 * pass ran out of time). The attempt counted at claim is returned, and the row becomes available
 * no earlier than `notBeforeMs` from now (the failed predecessor's backoff), database clock.
 * @returns how many rows this lease still owned
 */
export async function releaseUnsent(
  sql: Sql,
  leaseToken: string,
  rows: readonly { id: string; notBeforeMs: number }[],
): Promise<number> {
  if (rows.length === 0) return 0;
  const result = await sql`
    update outbox o
    set lease_token = null,
        lease_expires_at = null,
        attempts = greatest(o.attempts - 1, 0),
        available_at = greatest(o.available_at, now() + make_interval(secs => r.delay_ms / 1000.0))
    from unnest(${rows.map((r) => r.id)}::int8[], ${rows.map((r) => Math.round(r.notBeforeMs))}::int8[]) as r(id, delay_ms)
    where o.id = r.id and o.lease_token = ${leaseToken}::uuid
  `;
  return result.count;
}
