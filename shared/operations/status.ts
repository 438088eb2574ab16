/** Backlog figures for `outbox status`, `npm start` and the monitor's metrics. */
import { countFromDatabase, type Queryable } from '../platform/index.ts';

/** The outbox's state, counted with the database clock. */
export interface OutboxStatus {
  /** Rows neither published nor dead-lettered (waiting, in backoff, or leased). */
  pending: number;
  /** Age of the oldest pending row, seconds (0 when none): the lag health signal. */
  oldestPendingAgeSeconds: number;
  /** Pending rows currently leased by a relay (lease not yet expired). */
  inFlight: number;
  /** Rows dead-lettered, not discarded and not yet pruned. */
  deadLettered: number;
  /** Rows published and not yet pruned; -1 when not counted (`includePublished: false`). */
  published: number;
  /**
   * Parked inbox events awaiting an operator (wait-for-gap, `onGapTimeout: 'park'`), all consumers
   * of this database together, those being replayed included (`outbox inbox parked list`).
   */
  inboxParked: number;
}

/**
 * Counts the outbox by state. Pending figures read only unfinished rows (partial indexes) and the
 * dead-letter count the dead-letter index; the published count scans the whole table, so the
 * monitor leaves it out (`includePublished: false`). Ages use the database clock, so the process's
 * time zone and clock do not matter.
 */
export async function getStatus(
  sql: Queryable,
  options: { includePublished?: boolean } = {},
): Promise<OutboxStatus> {
  const includePublished = options.includePublished ?? true;
  const [row] = await sql<
    {
      pending: string;
      oldest: number | null;
      in_flight: string;
      dead: string;
      published: string | null;
      inbox_parked: string;
    }[]
  >`
    select p.pending, p.oldest, p.in_flight,
      -- the partial index on parked records (migration 010): a few rows at most
      (select count(*) from inbox_message where outcome in ('parked', 'replaying')) as inbox_parked,
      (select count(*) from outbox
       where dead_lettered_at is not null and published_at is null and discarded_at is null) as dead,
      case when ${includePublished}::boolean
        then (select count(*) from outbox where published_at is not null) end as published
    from (
      select count(*) as pending,
             extract(epoch from now() - min(created_at))::float8 as oldest,
             count(*) filter (where lease_expires_at > now()) as in_flight
      from outbox where published_at is null and dead_lettered_at is null
    ) p
  `;
  return {
    pending: countFromDatabase(row?.pending, 'pending'),
    oldestPendingAgeSeconds: Math.max(0, row?.oldest ?? 0),
    inFlight: countFromDatabase(row?.in_flight, 'in flight'),
    deadLettered: countFromDatabase(row?.dead, 'dead-lettered'),
    published: row?.published == null ? -1 : countFromDatabase(row.published, 'published'),
    inboxParked: countFromDatabase(row?.inbox_parked, 'inbox parked'),
  };
}
