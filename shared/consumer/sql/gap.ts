/**
 * The wait-for-gap bookkeeping (`inbox_gap`): for each event waiting for a missing one of its
 * chain, where it stands (chain and position) and when it was first and last seen. Written outside
 * the invocation's transaction (the gap rolls that back), read and cleared inside it.
 */
import type { Sql, Tx } from '../../platform/db.ts';
import type { ChainKey } from './chain.ts';

/**
 * How long an event has waited and how long ago it was last seen, seconds (database clock; null on
 * its first delivery), and the lowest position of another event of its chain seen waiting between
 * the chain's position and its own (null when none is).
 */
export interface DbGapWait {
  waited: number | null;
  idle: number | null;
  lower: string | null;
}

/** Where a waiting event stands, and how long a wait stays remembered. */
export interface GapPlace {
  chain: ChainKey;
  eventId: string;
  /** Its position in the chain. */
  position: bigint;
  /**
   * An event last seen longer ago than this, seconds, starts its wait anew (a replay), and is no
   * longer waited for by the events above it: no retry of an asynchronous invocation comes later
   * than Lambda's maximum event age.
   */
  forgetAfterSeconds: number;
}

/**
 * The event's wait so far, and the lowest other event of its chain waiting below it (`last` is
 * the chain's position). One index scan of the chain's waiting events (`inbox_gap_chain_idx`).
 */
export async function readGap(tx: Tx, place: GapPlace, last: bigint): Promise<DbGapWait> {
  const { chain: k, eventId, position, forgetAfterSeconds } = place;
  const [row] = await tx<DbGapWait[]>`
    select
      (select extract(epoch from now() - first_seen_at)::float8 from outbox.inbox_gap
        where consumer = ${k.consumer} and message_key = ${eventId}) as waited,
      (select extract(epoch from now() - last_seen_at)::float8 from outbox.inbox_gap
        where consumer = ${k.consumer} and message_key = ${eventId}) as idle,
      (select min(position)::text from outbox.inbox_gap
        where consumer = ${k.consumer} and aggregate_type = ${k.aggregateType}
          and aggregate_id = ${k.aggregateId} and chain = ${k.chain}
          and position > ${String(last)} and position < ${String(position)}
          and message_key <> ${eventId}
          and last_seen_at > now() - pg_catalog.make_interval(secs => ${forgetAfterSeconds})) as lower`;
  return row as DbGapWait;
}

/** Forgets the event's wait (it was applied, or its chain moved on). */
export async function clearGap(tx: Tx, consumer: string, eventId: string): Promise<void> {
  // A function (migration 026): a consumer's role has no DELETE, which would let it lock the
  // table. Called only when there is a row: its check of the caller's policy costs ~70 µs.
  await tx`select case when exists (select from outbox.inbox_gap where consumer = ${consumer} and message_key = ${eventId})
    then outbox.outbox_inbox_forget_gap(${consumer}, ${eventId}) end`;
}

/**
 * Remembers, outside any transaction, where the event waits and when it was first seen waiting:
 * kept across Lambda's retries however late they come, started anew only when its last attempt is
 * older than `forgetAfterSeconds` (a replay), and last seen.
 */
export function rememberGap(sql: Sql, place: GapPlace) {
  const { chain: k, eventId, position, forgetAfterSeconds } = place;
  return sql`
    insert into outbox.inbox_gap as g (consumer, message_key, first_seen_at, last_seen_at,
                                aggregate_type, aggregate_id, chain, position)
    values (${k.consumer}, ${eventId}, now(), now(), ${k.aggregateType}, ${k.aggregateId}, ${k.chain},
            ${String(position)})
    on conflict (consumer, message_key) do update set
      first_seen_at = case when g.last_seen_at < now() - pg_catalog.make_interval(secs => ${forgetAfterSeconds})
                           then now() else g.first_seen_at end,
      last_seen_at = now(),
      aggregate_type = excluded.aggregate_type, aggregate_id = excluded.aggregate_id,
      chain = excluded.chain, position = excluded.position`;
}
