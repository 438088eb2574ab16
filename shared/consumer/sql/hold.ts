/**
 * The held aggregates of `parkAfterAttempts` (migration 027): an event parked after its handler
 * failed that many times holds its aggregate, and the aggregate's later events park behind it.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Queryable, Tx } from '../../platform/db.ts';

/** The lowest held record of an aggregate below a sequence. */
export interface DbHeldEvent {
  event_id: string;
  sequence: string;
  outcome: string;
}

/**
 * The lowest event of the aggregate that holds it (parked or being replayed) below `sequence`, or
 * undefined when nothing holds it there. With `outboxId`, only that outbox's events hold it (and
 * those that named none, recorded before migration 031): another outbox numbers its own events.
 */
export async function readHolder(
  tx: Tx,
  consumer: string,
  aggregateType: string,
  aggregateId: string,
  sequence: bigint,
  outboxId?: string,
): Promise<DbHeldEvent | undefined> {
  const [row] = await tx<DbHeldEvent[]>`
    select event_id, sequence, outcome from outbox.inbox_message
    where consumer = ${consumer} and aggregate_type = ${aggregateType} and aggregate_id = ${aggregateId}
      and holds_chain and sequence < ${String(sequence)} and outcome in ('parked', 'replaying')
      and (${outboxId ?? null}::uuid is null or outbox_id is null or outbox_id = ${outboxId ?? null}::uuid)
    order by sequence limit 1`;
  return row;
}

/** Whether the record of `key` holds its aggregate (read under the lock lockMessage took). */
export async function readHoldsChain(tx: Tx, consumer: string, key: string): Promise<boolean> {
  const [row] = await tx<{ holds_chain: boolean | null }[]>`
    select holds_chain from outbox.inbox_message where consumer = ${consumer} and message_key = ${key}`;
  return row?.holds_chain === true;
}

/** Parks the record of `key` holding its aggregate, keeping the whole event for a replay. */
export async function markHeld(
  tx: Tx,
  consumer: string,
  key: string,
  event: EventBridgeEvent<string, unknown>,
  reason: string,
): Promise<void> {
  await tx`
    update outbox.inbox_message
    set outcome = 'parked', holds_chain = true, event = ${tx.json(event as never)}, reason = ${reason}
    where consumer = ${consumer} and message_key = ${key}`;
}

/** How many times the event's handler failed (its trace's `handler_failures`), 0 without a trace. */
export async function readHandlerFailures(
  sql: Queryable,
  consumer: string,
  eventId: string,
): Promise<number> {
  const [row] = await sql<{ handler_failures: number }[]>`
    select handler_failures from outbox.inbox_failed where consumer = ${consumer} and event_id = ${eventId}`;
  return row?.handler_failures ?? 0;
}
