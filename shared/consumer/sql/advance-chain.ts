/** Moves a chain's order state to the position of the event just taken. */
import type { Tx } from '../../platform/db.ts';
import { type ChainKey, chainRow } from './chain.ts';

/** Sets the chain's `last_sequence` (its row is locked by {@link lockChain} in this transaction). */
export async function advanceChain(tx: Tx, k: ChainKey, position: bigint): Promise<void> {
  await tx`
    update outbox.inbox_aggregate set last_sequence = ${String(position)}, updated_at = now()
    where ${chainRow(tx, k)}`;
}
