/**
 * The wait-for-gap bookkeeping (`inbox_gap`): when an event waiting for a missing one of its chain
 * was first and last seen. Written outside the invocation's transaction (the gap rolls that back),
 * read and cleared inside it.
 */
import type { Sql, Tx } from '../../platform/db.ts';

/** How long an event has waited, and how long ago it was last seen, seconds (database clock). */
export interface DbGapWait {
  waited: number;
  idle: number;
}

/** The event's wait so far; undefined on its first delivery. */
export async function readGap(tx: Tx, consumer: string, eventId: string): Promise<DbGapWait | undefined> {
  const [row] = await tx<DbGapWait[]>`
    select extract(epoch from now() - first_seen_at)::float8 as waited,
           extract(epoch from now() - last_seen_at)::float8 as idle
    from inbox_gap where consumer = ${consumer} and message_key = ${eventId}`;
  return row;
}

/** Forgets the event's wait (it was applied, or its chain moved on). */
export async function clearGap(tx: Tx, consumer: string, eventId: string): Promise<void> {
  await tx`delete from inbox_gap where consumer = ${consumer} and message_key = ${eventId}`;
}

/**
 * Remembers, outside any transaction, when the event was first seen waiting (kept across Lambda's
 * retries, but started anew when its last attempt is older than the retry window) and last seen.
 */
export function rememberGap(sql: Sql, consumer: string, eventId: string, retryWindowSeconds: number) {
  return sql`
    insert into inbox_gap as g (consumer, message_key, first_seen_at, last_seen_at)
    values (${consumer}, ${eventId}, now(), now())
    on conflict (consumer, message_key) do update set
      first_seen_at = case when g.last_seen_at < now() - pg_catalog.make_interval(secs => ${retryWindowSeconds})
                           then now() else g.first_seen_at end,
      last_seen_at = now()`;
}
