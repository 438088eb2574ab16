/** Hands back claimed rows that were never sent: one statement, token-guarded. */
import type { Sql } from '../../platform/index.ts';

/** A claimed row handed back unsent. */
export interface UnsentRow {
  id: string;
  /** Available again no earlier than this long from now, ms (the failed predecessor's backoff). */
  notBeforeMs: number;
  /**
   * The lease spent an attempt on it (a head, at claim) that is now returned. False for a
   * successor whose round never started: it spent nothing.
   */
  giveBackAttempt: boolean;
}

/**
 * Hands back rows that were claimed but never sent (their aggregate's earlier event failed, or the
 * pass ran out of time). An attempt spent on a row under this lease is returned, and the row
 * becomes available no earlier than `notBeforeMs` from now, database clock.
 * @returns how many rows this lease still owned
 */
export async function releaseUnsent(
  sql: Sql,
  leaseToken: string,
  rows: readonly UnsentRow[],
): Promise<number> {
  if (rows.length === 0) return 0;
  const result = await sql`
    update outbox o
    set lease_token = null,
        lease_expires_at = null,
        attempts = greatest(o.attempts - case when r.give_back then 1 else 0 end, 0),
        available_at = greatest(o.available_at, now() + pg_catalog.make_interval(secs => r.delay_ms::float8 / 1000::float8))
    from unnest(
      ${rows.map((r) => r.id)}::int8[],
      ${rows.map((r) => Math.round(r.notBeforeMs))}::int8[],
      ${rows.map((r) => (r.giveBackAttempt ? 'true' : 'false'))}::text[]::boolean[]
    ) as r(id, delay_ms, give_back)
    where o.id = r.id and o.lease_token = ${leaseToken}::uuid
  `;
  return result.count;
}
