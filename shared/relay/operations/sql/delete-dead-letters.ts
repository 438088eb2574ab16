/** One batch of pruning dead letters. */
import type { Queryable } from '../../../platform/index.ts';
import { expiredDeadLetter } from './conditions.ts';

/**
 * Deletes up to `batchSize` dead letters that {@link expiredDeadLetter} lets go, oldest first.
 * @returns rows deleted
 */
export async function deleteDeadLetters(
  sql: Queryable,
  retentionSeconds: number,
  batchSize: number,
): Promise<number> {
  const r = await sql`
    delete from outbox d
    where d.id = any(array(
        select d.id from outbox d
        where ${expiredDeadLetter(sql, retentionSeconds)}
        order by d.dead_lettered_at, d.id
        limit ${batchSize}
      ))
      and ${expiredDeadLetter(sql, retentionSeconds)}`;
  return r.count;
}
