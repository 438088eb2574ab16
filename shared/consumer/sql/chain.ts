/** The row of `inbox_aggregate` that holds one chain's order state, and the condition naming it. */
import type { Tx } from '../../platform/db.ts';

/**
 * The primary key of a chain's state row: one consumer's events of one aggregate from one source,
 * and with `types` one type of them (`chain` is the type, or `''` for every type).
 */
export interface ChainKey {
  consumer: string;
  aggregateType: string;
  aggregateId: string;
  source: string;
  chain: string;
}

/** The WHERE condition that names one chain's row (unqualified: the innermost `inbox_aggregate`). */
export function chainRow(tx: Tx, k: ChainKey) {
  return tx`consumer = ${k.consumer} and aggregate_type = ${k.aggregateType}
    and aggregate_id = ${k.aggregateId} and source = ${k.source} and chain = ${k.chain}`;
}
