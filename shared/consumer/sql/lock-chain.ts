/**
 * Locks a chain's order state (`inbox_aggregate`), creating it when the chain is new. Two
 * statements in one module: the insert is the fallback of the locking read, and means nothing alone.
 */
import type { Tx } from '../../platform/db.ts';
import { type ChainKey, chainRow } from './chain.ts';

/** The position of the last event a chain took in order (int8 as a string). */
export interface DbChainState {
  last_sequence: string;
}

/**
 * One round of locking: reads the chain's row `for update`, or, when there is none, creates it at
 * 0 (nothing taken yet), or with `adopt` at the position of the row written before migration 010
 * for the aggregate (source '', chain ''), if there is one.
 * @returns the position, or undefined when another transaction created the row meanwhile (the
 *   caller reads again: its insert did nothing)
 */
export async function lockChain(tx: Tx, k: ChainKey, adopt: boolean): Promise<bigint | undefined> {
  const [row] = await tx<DbChainState[]>`
      select last_sequence from inbox_aggregate where ${chainRow(tx, k)} for update`;
  if (row) return BigInt(row.last_sequence);
  const [created] = await tx<DbChainState[]>`
      insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence)
      values (${k.consumer}, ${k.aggregateType}, ${k.aggregateId}, ${k.source}, ${k.chain}, coalesce((
        select l.last_sequence from inbox_aggregate l
        where l.consumer = ${k.consumer} and l.aggregate_type = ${k.aggregateType}
          and l.aggregate_id = ${k.aggregateId} and l.source = '' and l.chain = ''
          and ${adopt}::boolean), 0))
      on conflict do nothing
      returning last_sequence`;
  return created ? BigInt(created.last_sequence) : undefined;
}
