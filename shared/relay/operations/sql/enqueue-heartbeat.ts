/** The heartbeat's enqueue: migration 030's function, as the monitor role may call it. */
import type { Queryable } from '../../../platform/index.ts';

/** The event of this interval, and whether it was enqueued before. */
export interface DbHeartbeat {
  event_id: string;
  duplicate: boolean;
}

/** Enqueues this interval's heartbeat, once per interval (seconds, 60 to 86,400). */
export async function enqueueHeartbeatRow(
  sql: Queryable,
  intervalSeconds: number,
): Promise<DbHeartbeat | undefined> {
  // Typed argument: an untyped one would let a planted overload match better.
  const [row] = await sql<DbHeartbeat[]>`
    select event_id::text, duplicate from outbox_enqueue_heartbeat(${intervalSeconds}::integer)`;
  return row;
}
