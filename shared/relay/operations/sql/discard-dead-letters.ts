/** Discards dead letters: kept for audit, never published. */
import type { Queryable } from '../../../platform/index.ts';
import { deadLetterRow } from './conditions.ts';

/**
 * Stamps `discarded_at` on the dead letters among `ids` not yet discarded.
 * @returns rows discarded
 */
export async function discardDeadLetterRows(sql: Queryable, ids: readonly string[]): Promise<number> {
  const r = await sql`
    update outbox set discarded_at = now()
    where id = any(${ids}::int8[]) and ${deadLetterRow(sql)} and discarded_at is null`;
  return r.count;
}
