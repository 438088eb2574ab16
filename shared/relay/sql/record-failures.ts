/** Schedules retries and dead-letters rows after a failed publish: one statement, token-guarded. */
import type { Sql } from '../../platform/index.ts';

/** A failed publish attempt of one row. */
export interface Failure {
  id: string;
  /** `ErrorCode: message`, kept in `last_error`. */
  error: string;
  /** Dead-letter now (permanent error or attempts exhausted) instead of retrying. */
  deadLetter: boolean;
  /** Backoff before the next attempt, ms (ignored when dead-lettering). */
  retryInMs: number;
  /**
   * Return the attempt counted at claim: the failure was back-pressure (throttling, or a request
   * that failed as a whole: network, timeout, HTTP 5xx), not the entry's own, so it must not bring
   * the row closer to dead-lettering.
   */
  giveBackAttempt?: boolean;
}

/**
 * Schedules retries (available again after the backoff, measured on the database clock) and
 * dead-letters rows, in one statement.
 * @returns the ids this lease still owned and recorded; the rest were lost to another relay
 */
export async function recordFailures(
  sql: Sql,
  leaseToken: string,
  failures: readonly Failure[],
): Promise<Set<string>> {
  if (failures.length === 0) return new Set();
  const rows = await sql<{ id: string }[]>`
    update outbox o
    set lease_token = null,
        lease_expires_at = null,
        last_error = f.error,
        attempts = greatest(o.attempts - case when f.give_back then 1 else 0 end, 0),
        available_at = case when f.dead then o.available_at
                            else now() + pg_catalog.make_interval(secs => f.retry_ms::float8 / 1000::float8) end,
        dead_lettered_at = case when f.dead then now() else null end
    from unnest(
      ${failures.map((f) => f.id)}::int8[],
      ${failures.map((f) => f.error.slice(0, 2000))}::text[],
      ${failures.map((f) => (f.deadLetter ? 'true' : 'false'))}::text[]::boolean[],
      ${failures.map((f) => Math.round(f.retryInMs))}::int8[],
      ${failures.map((f) => (f.giveBackAttempt ? 'true' : 'false'))}::text[]::boolean[]
    ) as f(id, error, dead, retry_ms, give_back)
    where o.id = f.id and o.lease_token = ${leaseToken}::uuid
    returning o.id
  `;
  return new Set(rows.map((r) => r.id));
}
