/** Parks an event for an operator (wait-for-gap, `onGapTimeout: 'park'`). */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Tx } from '../../platform/db.ts';

/** Sets the record `parked` and keeps the whole EventBridge event in it, for a replay. */
export async function markParked(
  tx: Tx,
  consumer: string,
  key: string,
  event: EventBridgeEvent<string, unknown>,
  reason: string,
): Promise<void> {
  await tx`
      update outbox.inbox_message
      set outcome = 'parked', event = ${tx.json(event as never)},
          reason = ${reason}
      where consumer = ${consumer} and message_key = ${key}`;
}
