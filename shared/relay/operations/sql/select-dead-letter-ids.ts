/** Finds dead letters by filter, for `list` and `--all`. */
import type { Queryable } from '../../../platform/index.ts';
import { deadLetterRow } from './conditions.ts';

/**
 * A dead-letter filter as statement parameters: null matches everything. `since` is an instant or
 * seconds before the database's `now()` (`dead_lettered_at` is written with its clock).
 */
export interface DeadLetterCriteria {
  includeDiscarded: boolean;
  type: string | null;
  aggregateType: string | null;
  aggregateId: string | null;
  sinceAt: Date | null;
  sinceSecondsAgo: number | null;
}

/** Row ids (int8 as strings) of the dead letters matching `c`, oldest first, at most `limit`. */
export async function selectDeadLetterIds(
  sql: Queryable,
  c: DeadLetterCriteria,
  limit: number,
): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`
    select id from outbox
    where ${deadLetterRow(sql)}
      and (${c.includeDiscarded}::boolean or discarded_at is null)
      and (${c.type}::text is null or event_type = ${c.type})
      and (${c.aggregateType}::text is null or aggregate_type = ${c.aggregateType})
      and (${c.aggregateId}::text is null or aggregate_id = ${c.aggregateId})
      and (${c.sinceAt}::timestamptz is null or dead_lettered_at >= ${c.sinceAt}::timestamptz)
      and (${c.sinceSecondsAgo}::float8 is null
           or dead_lettered_at >= now() - pg_catalog.make_interval(secs => ${c.sinceSecondsAgo}::float8))
    order by dead_lettered_at, id
    limit ${limit}`;
  return rows.map((r) => r.id);
}
