/**
 * The dry run of pruning: what the deletes would take, counted by the same conditions. Two
 * statements, as the deletes they count are: the key count reads the rows the first would take.
 */
import type { Queryable } from '../../../platform/index.ts';
import { expiredDeadLetter } from './conditions.ts';

/** Expired rows of the outbox, by kind (int8 counts as strings). */
export interface DbExpiredCounts {
  published: string;
  dead: string;
}

/** Counts the published rows and dead letters past their retentions (seconds). */
export async function countExpiredRows(
  sql: Queryable,
  publishedRetentionSeconds: number,
  deadLetterRetentionSeconds: number,
): Promise<DbExpiredCounts | undefined> {
  const [row] = await sql<DbExpiredCounts[]>`
      select
        (select count(*) from outbox where published_at < now() - pg_catalog.make_interval(secs => ${publishedRetentionSeconds})) as published,
        (select count(*) from outbox d where ${expiredDeadLetter(sql, deadLetterRetentionSeconds)}) as dead`;
  return row;
}

/**
 * Counts the idempotency keys past their retention whose event would be gone after this run:
 * already gone, or about to be pruned. Seconds.
 */
export async function countExpiredKeys(
  sql: Queryable,
  keyRetentionSeconds: number,
  publishedRetentionSeconds: number,
  deadLetterRetentionSeconds: number,
): Promise<{ n: string } | undefined> {
  const [keys] = await sql<{ n: string }[]>`
        select count(*) as n from outbox_idempotency_key k
        where k.created_at < now() - pg_catalog.make_interval(secs => ${keyRetentionSeconds})
          and not exists (
            select from outbox o where o.id = k.outbox_id
              and not coalesce(o.published_at < now() - pg_catalog.make_interval(secs => ${publishedRetentionSeconds}), false)
              and not exists (
                select from outbox d where d.id = o.id and ${expiredDeadLetter(sql, deadLetterRetentionSeconds)}))`;
  return keys;
}
