/** The row of `inbox_aggregate` that holds one chain's order state, and the condition naming it. */
import type { Tx } from '../../platform/db.ts';

/**
 * The key of a chain's state row: one consumer's events of one aggregate as one outbox numbers them
 * (across the sources it emits), and with `types` one type of them. The aggregate's row (source
 * `''`, `chain` the type or `''` for every type) belongs to the first outbox that named itself
 * (`inbox_aggregate.outbox_id`, migration 031), and to the events that name none; another outbox's
 * chain is a row of its own, `ofOutbox` set and `chain` = {@link outboxChain}. The per-source rows
 * of migrations 010 to 017 are only read, to adopt their position (lock-chain.ts).
 */
export interface ChainKey {
  consumer: string;
  aggregateType: string;
  aggregateId: string;
  /** The row's `chain` column. */
  chain: string;
  /** The outbox whose row of its own this is; undefined for the aggregate's row. */
  ofOutbox?: string;
}

/**
 * The `chain` column of an outbox's row of its own: `outbox:<uuid>/` and the chain (`''` or the
 * type). No release before migration 031 reads or raises a row of that chain (they name the type
 * or `''`), so a consumer of the previous release beside this one leaves it alone.
 */
export function outboxChain(outboxId: string, chain: string): string {
  return `outbox:${outboxId}/${chain}`;
}

/** The key of `outboxId`'s row of its own for the chain of `aggregate` (the aggregate's row key). */
export function ownChainKey(aggregate: ChainKey, outboxId: string): ChainKey {
  return { ...aggregate, chain: outboxChain(outboxId, aggregate.chain), ofOutbox: outboxId };
}

/** The WHERE condition that names one chain's row (unqualified: the innermost `inbox_aggregate`). */
export function chainRow(tx: Tx, k: ChainKey) {
  return tx`consumer = ${k.consumer} and aggregate_type = ${k.aggregateType}
    and aggregate_id = ${k.aggregateId} and source = '' and chain = ${k.chain}`;
}
