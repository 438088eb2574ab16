/**
 * Locks a chain's order state (`inbox_aggregate`), creating it when the chain is new, and records
 * the outbox that adopts a chain kept before migration 031. Statements in one module: the insert is the fallback of the locking read, and means nothing alone.
 */
import type { Sql, Tx } from '../../platform/db.ts';
import { type ChainKey, chainRow } from './chain.ts';

/** The position of the last event a chain took in order (int8 as a string). */
export interface DbChainState {
  last_sequence: string;
}

/**
 * The highest position the per-source rows of migrations 010 to 017 recorded for the chain (they
 * share the producer's one counter): adopted when the chain's row is created, and read at every
 * lock so that a consumer still running a version before migration 018 during a deploy, which
 * moves only its per-source row, cannot make the chain go backwards. An index range scan of the
 * aggregate's few rows (the primary key's prefix).
 */
function perSourcePosition(tx: Tx, k: ChainKey) {
  return tx`(select max(s.last_sequence) from outbox.inbox_aggregate s
    where s.consumer = ${k.consumer} and s.aggregate_type = ${k.aggregateType}
      and s.aggregate_id = ${k.aggregateId} and s.chain = ${k.chain} and s.source <> '')`;
}

/** A chain's row, locked: its position and the outbox that owns it (null: none named yet). */
export interface LockedChain {
  last: bigint;
  outboxId: string | null;
  /** The row locked is `own`'s (see {@link lockChain}), not `k`'s. */
  own: boolean;
}

/**
 * One round of locking: reads the chain's row `for update`, or, when there is none, creates it at
 * the position its per-source rows recorded, or 0 (nothing taken yet), owned by `outboxId`. Given
 * `own` (the event's outbox's row of its own), that row is read instead when it exists, in the same
 * statement: an outbox that does not own the aggregate's row neither locks it nor pays a round
 * trip more, and one that does pays an index probe.
 * @returns the position and owner, or undefined when another transaction created the row
 *   meanwhile (the caller reads again: its insert did nothing)
 */
export async function lockChain(
  tx: Tx,
  k: ChainKey,
  outboxId: string | undefined,
  own?: ChainKey,
): Promise<LockedChain | undefined> {
  const chain =
    own === undefined
      ? tx`${k.chain}`
      : tx`(case when exists (select from outbox.inbox_aggregate o
          where o.consumer = ${k.consumer} and o.aggregate_type = ${k.aggregateType}
            and o.aggregate_id = ${k.aggregateId} and o.source = '' and o.chain = ${own.chain})
          then ${own.chain} else ${k.chain} end)`;
  const [row] = await tx<(DbChainState & { outbox_id: string | null; chain: string })[]>`
      select greatest(a.last_sequence, (select max(s.last_sequence) from outbox.inbox_aggregate s
               where s.consumer = a.consumer and s.aggregate_type = a.aggregate_type
                 and s.aggregate_id = a.aggregate_id and s.chain = a.chain and s.source <> '')) as last_sequence,
             a.outbox_id::text as outbox_id, a.chain
      from outbox.inbox_aggregate a
      where a.consumer = ${k.consumer} and a.aggregate_type = ${k.aggregateType}
        and a.aggregate_id = ${k.aggregateId} and a.source = '' and a.chain = ${chain}
      for update of a`;
  if (row) {
    return { last: BigInt(row.last_sequence), outboxId: row.outbox_id, own: row.chain !== k.chain };
  }
  const [created] = await tx<DbChainState[]>`
      insert into outbox.inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence, outbox_id)
      values (${k.consumer}, ${k.aggregateType}, ${k.aggregateId}, '', ${k.chain},
              coalesce(${perSourcePosition(tx, k)}, 0), ${outboxId ?? null}::uuid)
      on conflict do nothing
      returning last_sequence`;
  return created
    ? { last: BigInt(created.last_sequence), outboxId: outboxId ?? null, own: false }
    : undefined;
}

/**
 * Records `outboxId` as the owner of the aggregate's chain row, locked by {@link lockChain} in this
 * transaction and owned by none yet: the first outbox that names itself continues the chain kept
 * before migration 031, in place (docs/inbox-order.md#two-outboxes-one-consumer). Not when another
 * outbox owns another chain row of the aggregate (with `types`, one per type): the aggregate's
 * history is that outbox's, and this one's events start a row of their own. (Two outboxes whose
 * first named events of one aggregate arrive at the same moment for two of its types may each
 * adopt one: each reads the other's sibling before it commits. With `types` only, once.)
 * @returns whether it adopted the row
 */
export async function adoptChain(tx: Tx, k: ChainKey, outboxId: string): Promise<boolean> {
  const adopted = await tx`update outbox.inbox_aggregate set outbox_id = ${outboxId}::uuid
    where ${chainRow(tx, k)} and outbox_id is null
      and not exists (select from outbox.inbox_aggregate o
        where o.consumer = ${k.consumer} and o.aggregate_type = ${k.aggregateType}
          and o.aggregate_id = ${k.aggregateId} and o.source = '' and o.chain not like 'outbox:%'
          and o.outbox_id <> ${outboxId}::uuid)
    returning 1`;
  return adopted.length > 0;
}

/**
 * The chain's position now, without a lock and outside any transaction: what an event waiting in
 * its invocation for a lower one of its chain polls (order.ts). The highest of the aggregate's rows
 * for the chain: a consumer of the previous release beside this one moves only its per-source row.
 * Undefined when the chain has no row.
 */
export async function readChainPosition(sql: Sql, k: ChainKey): Promise<bigint | undefined> {
  const [row] = await sql<{ last_sequence: string | null }[]>`
      select max(last_sequence) as last_sequence from outbox.inbox_aggregate
      where consumer = ${k.consumer} and aggregate_type = ${k.aggregateType}
        and aggregate_id = ${k.aggregateId} and chain = ${k.chain}`;
  return row?.last_sequence == null ? undefined : BigInt(row.last_sequence);
}
