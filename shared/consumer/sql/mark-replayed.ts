/** Records a parked event as applied by the delivery an operator's replay caused. */
import type { Tx } from '../../platform/db.ts';

/** Sets the record `processed`, drops the kept event, and says in its reason that it was parked. */
export async function markReplayed(tx: Tx, consumer: string, key: string): Promise<void> {
  await tx`
        update outbox.inbox_message
        set outcome = 'processed', processed_at = now(), event = null, holds_chain = null,
            reason = 'parked, then replayed by an operator: ' || coalesce(reason, '')
        where consumer = ${consumer} and message_key = ${key}`;
}
