/** Records an event as superseded by a later one of its chain (ignore-stale). */
import type { Tx } from '../../platform/db.ts';

/** Sets the record `stale`, with the reason. */
export async function markStale(tx: Tx, consumer: string, key: string, reason: string): Promise<void> {
  await tx`
        update outbox.inbox_message
        set outcome = 'stale', reason = ${reason}
        where consumer = ${consumer} and message_key = ${key}`;
}
