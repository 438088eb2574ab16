/** Moves a chain's order state to the position of the event just taken. */
import type { Tx } from '../../platform/db.ts';
import { type ChainKey, chainRow } from './chain.ts';

/**
 * Sets the chain's `last_sequence` (its row is locked by {@link lockChain} in this transaction),
 * and raises the per-source rows of migrations 010 to 017 to it: the event's own source's, created
 * when missing, and any other source's. A consumer of the previous release, running beside this one
 * during a deploy or after a rollback, reads only its event's per-source row; left behind, it made
 * that consumer wait for (or park, or report `ahead` over) events this one had applied. Contract a
 * release after no supported release reads them (CONTRIBUTING.md#migrations).
 */
export async function advanceChain(tx: Tx, k: ChainKey, position: bigint, source: string): Promise<void> {
  const p = String(position);
  if (k.ofOutbox !== undefined) {
    // An outbox's row of its own (migration 031): no release before it reads a per-source row of it.
    await tx`update outbox.inbox_aggregate set last_sequence = greatest(last_sequence, ${p}), updated_at = now()
      where ${chainRow(tx, k)}`;
    return;
  }
  // One statement, one round trip: the rows of the chain raised, the source's row added when missing.
  await tx`
    with raised as (
      update outbox.inbox_aggregate set last_sequence = greatest(last_sequence, ${p}), updated_at = now()
      where consumer = ${k.consumer} and aggregate_type = ${k.aggregateType}
        and aggregate_id = ${k.aggregateId} and chain = ${k.chain}
      returning source
    )
    insert into outbox.inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence)
    select ${k.consumer}, ${k.aggregateType}, ${k.aggregateId}, ${source}, ${k.chain}, ${p}
    where not exists (select from raised where raised.source = ${source})
    on conflict do nothing`;
}
