/** The row of `inbox_aggregate` that holds one chain's order state, and the condition naming it. */
import type { Tx } from '../../platform/db.ts';

/**
 * The key of a chain's state row: one consumer's events of one aggregate, across sources (the
 * producer numbers an aggregate's events in one outbox whatever their source), and with `types`
 * one type of them (`chain` is the type, or `''` for every type). The row has source `''`; the
 * per-source rows of migrations 010 to 017 are only read, to adopt their position (lock-chain.ts).
 */
export interface ChainKey {
  consumer: string;
  aggregateType: string;
  aggregateId: string;
  chain: string;
}

/** The WHERE condition that names one chain's row (unqualified: the innermost `inbox_aggregate`). */
export function chainRow(tx: Tx, k: ChainKey) {
  return tx`consumer = ${k.consumer} and aggregate_type = ${k.aggregateType}
    and aggregate_id = ${k.aggregateId} and source = '' and chain = ${k.chain}`;
}
