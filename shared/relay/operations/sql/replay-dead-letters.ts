/** Puts dead letters back to pending. */
import type { Queryable } from '../../../platform/index.ts';
import { deadLetterRow } from './conditions.ts';

/**
 * Attempts reset to 0, available now, error and lease cleared, for the dead letters among `ids`.
 * @returns rows replayed
 */
export async function replayDeadLetterRows(sql: Queryable, ids: readonly string[]): Promise<number> {
  const r = await sql`
    update outbox
    set dead_lettered_at = null, discarded_at = null, attempts = 0, available_at = now(),
        last_error = null, lease_token = null, lease_expires_at = null
    where id = any(${ids}::int8[]) and ${deadLetterRow(sql)}`;
  return r.count;
}
