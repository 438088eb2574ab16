/**
 * The heartbeat (docs/observe.md#the-heartbeat): an event the monitor enqueues through the outbox
 * once per interval, so that every consumer sees the whole way (relay, bus, rule, consumer) carry
 * an event even while no business event flows. Enqueued by migration 030's
 * `outbox_enqueue_heartbeat`, which the monitor role may execute and nothing else of the producer's.
 */
import { HEARTBEAT_EVENT, type Queryable } from '../../platform/index.ts';
import { enqueueHeartbeatRow } from './sql/index.ts';

export { HEARTBEAT_EVENT };

/** What {@link enqueueHeartbeat} did: the event of this interval, new or already enqueued. */
export interface HeartbeatResult {
  eventId: string;
  /** True when this interval's heartbeat was enqueued before (an earlier run in the same interval). */
  duplicate: boolean;
}

/**
 * Enqueues this interval's heartbeat, once per interval however often it is called (its
 * idempotency key is the interval's start on the database's clock).
 * @param intervalSeconds 60 to 86,400
 * @throws the database's error: 42883 when migration 030 is missing, 42501 without EXECUTE
 */
export async function enqueueHeartbeat(sql: Queryable, intervalSeconds: number): Promise<HeartbeatResult> {
  const row = await enqueueHeartbeatRow(sql, intervalSeconds);
  if (!row) throw new Error('outbox_enqueue_heartbeat returned no row');
  return { eventId: row.event_id, duplicate: row.duplicate };
}
