/** The outbox's backlog figures, in one statement. */
import type { Queryable } from '../../../platform/index.ts';
import { pendingRow } from '../../sql/conditions.ts';
import { deadLetterRow } from './conditions.ts';

/** The counts (int8 as strings) and the oldest pending row's age (seconds). */
export interface DbOutboxCounts {
  pending: string;
  oldest: number | null;
  in_flight: string;
  dead: string;
  /** Null when not counted. */
  published: string | null;
  inbox_parked: string;
  inbox_failed: string;
  /** Failed inbox events whose last attempt is more recent (Lambda may still retry them). */
  inbox_failed_retrying: string;
}

/**
 * Counts the outbox by state. Pending figures read only unfinished rows (partial indexes) and the
 * dead-letter count the dead-letter index; the published count, which scans the whole table, only
 * when `includePublished`. Ages use the database clock.
 * @param failedSettleSeconds failed inbox events count once their last attempt is this old
 */
export async function countOutbox(
  sql: Queryable,
  includePublished: boolean,
  failedSettleSeconds: number,
): Promise<DbOutboxCounts | undefined> {
  const [row] = await sql<DbOutboxCounts[]>`
    select p.pending, p.oldest, p.in_flight,
      -- the partial index on parked records (migration 010): a few rows at most
      (select count(*) from outbox.inbox_message where outcome in ('parked', 'replaying')) as inbox_parked,
      -- failed inbox events no retry applied (their last_failed_at index; a few rows at most)
      (select count(*) from outbox.inbox_failed
       where last_failed_at < now() - pg_catalog.make_interval(secs => ${failedSettleSeconds})) as inbox_failed,
      (select count(*) from outbox.inbox_failed
       where last_failed_at >= now() - pg_catalog.make_interval(secs => ${failedSettleSeconds})) as inbox_failed_retrying,
      (select count(*) from outbox
       where ${deadLetterRow(sql)} and discarded_at is null) as dead,
      case when ${includePublished}::boolean
        then (select count(*) from outbox where published_at is not null) end as published
    from (
      select count(*) as pending,
             extract(epoch from now() - min(created_at))::float8 as oldest,
             count(*) filter (where lease_expires_at > now()) as in_flight
      from outbox where ${pendingRow(sql)}
    ) p
  `;
  return row;
}
