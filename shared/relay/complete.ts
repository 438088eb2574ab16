/**
 * Terminal and retry writes after a publish attempt. Each is one statement for a whole group of
 * rows (never one per row) and each is guarded by the lease token: a relay whose lease expired
 * finds its rows taken and changes nothing (the rows it could not update are reported as lost).
 */
import type { Sql } from '../platform/index.ts';

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

/** A failed publish attempt of one row. */
export interface Failure {
  id: string;
  /** `ErrorCode: message`, kept in `last_error`. */
  error: string;
  /** Dead-letter now (permanent error or attempts exhausted) instead of retrying. */
  deadLetter: boolean;
  /** Backoff before the next attempt, ms (ignored when dead-lettering). */
  retryInMs: number;
}

/**
 * Schedules retries (available again after the backoff, measured on the database clock) and
 * dead-letters rows, in one statement.
 * @returns how many rows this lease still owned
 */
export async function recordFailures(
  sql: Sql,
  leaseToken: string,
  failures: readonly Failure[],
): Promise<number> {
  if (failures.length === 0) return 0;
  const result = await sql`
    update outbox o
    set lease_token = null,
        lease_expires_at = null,
        last_error = f.error,
        available_at = case when f.dead then o.available_at
                            else now() + make_interval(secs => f.retry_ms / 1000.0) end,
        dead_lettered_at = case when f.dead then now() else null end
    from unnest(
      ${failures.map((f) => f.id)}::int8[], ${failures.map((f) => f.error.slice(0, 2000))}::text[],
      ${failures.map((f) => (f.deadLetter ? 'true' : 'false'))}::text[]::boolean[], ${failures.map((f) => Math.round(f.retryInMs))}::int8[]
    ) as f(id, error, dead, retry_ms)
    where o.id = f.id and o.lease_token = ${leaseToken}::uuid
  `;
  return result.count;
}

/**
 * Hands back rows that were claimed but never sent (their aggregate's earlier event failed, or the
 * lease was running out). The attempt counted at claim is returned, and the row becomes available
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

/**
 * Makes the next unfinished event of each aggregate claimable now, undoing the park the claim put
 * on it, once the aggregate's claimed events are all settled. Only a parked row is touched: an
 * unparked next event may be in the middle of being claimed by another relay, and writing it then
 * would make that claim skip it (the row changed under its lock).
 * @param aggregates (aggregateType, aggregateId) pairs whose claimed group completed
 */
export async function unparkNextEvents(
  sql: Sql,
  aggregates: readonly { aggregateType: string; aggregateId: string }[],
): Promise<void> {
  if (aggregates.length === 0) return;
  await sql`
    update outbox o
    set available_at = least(o.available_at, now())
    where o.id = any(array(
      select (
        select n.id from outbox n
        where n.aggregate_type = a.t and n.aggregate_id = a.i
          and n.published_at is null and n.dead_lettered_at is null
        order by n.sequence
        limit 1
      )
      from unnest(${aggregates.map((a) => a.aggregateType)}::text[], ${aggregates.map((a) => a.aggregateId)}::text[]) as a(t, i)
    ))
      and o.available_at > now()
  `;
}

/**
 * Hands back every row still held by a lease whose pass failed on the database (connection lost
 * mid-pass), returning the attempt counted at claim: a dropped connection is not the event's
 * fault, and repeated drops must not dead-letter healthy events. Some of these rows may have
 * reached the bus before the failure; they are published again (at least once).
 * @returns how many rows were handed back
 */
export async function abandonLease(sql: Sql, leaseToken: string): Promise<number> {
  const r = await sql`
    update outbox
    set lease_token = null, lease_expires_at = null, attempts = greatest(attempts - 1, 0)
    where lease_token = ${leaseToken}::uuid and published_at is null and dead_lettered_at is null`;
  return r.count;
}
