/** One batch of pruning published rows. */
import type { Queryable } from '../../../platform/index.ts';

/**
 * Deletes up to `batchSize` published rows older than the retention (seconds), oldest first by id,
 * the primary key: expired published rows form (roughly) a prefix of it.
 * @returns rows deleted
 */
export async function deletePublished(
  sql: Queryable,
  retentionSeconds: number,
  batchSize: number,
): Promise<number> {
  const r = await sql`
    delete from outbox
    where id = any(array(
        select id from outbox
        where published_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
        order by id
        limit ${batchSize}
      ))
      and published_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})`;
  return r.count;
}
