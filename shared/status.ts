/** Backlog figures for `outbox status`, `npm start` and (later) the monitor's metrics. */
import type { Sql } from './db.ts';

/** The outbox's state, counted with the database clock. */
export interface OutboxStatus {
  /** Rows neither published nor dead-lettered (waiting, in backoff, or leased). */
  pending: number;
  /** Age of the oldest pending row, seconds (0 when none): the lag health signal. */
  oldestPendingAgeSeconds: number;
  /** Pending rows currently leased by a relay (lease not yet expired). */
  inFlight: number;
  /** Rows dead-lettered and not yet pruned. */
  deadLettered: number;
  /** Rows published and not yet pruned. */
  published: number;
}

/**
 * Counts the outbox by state in one statement. `pending` and the oldest age use the partial
 * pending index; the published count scans the table, so it costs more on a large history.
 */
export async function getStatus(sql: Sql): Promise<OutboxStatus> {
  const [row] = await sql<
    { pending: string; oldest: number | null; in_flight: string; dead: string; published: string }[]
  >`
    select
      count(*) filter (where published_at is null and dead_lettered_at is null) as pending,
      extract(epoch from now() - min(created_at) filter (where published_at is null and dead_lettered_at is null))::float8 as oldest,
      count(*) filter (where published_at is null and dead_lettered_at is null and lease_expires_at > now()) as in_flight,
      count(*) filter (where dead_lettered_at is not null) as dead,
      count(*) filter (where published_at is not null) as published
    from outbox
  `;
  return {
    pending: Number(row?.pending ?? 0),
    oldestPendingAgeSeconds: Math.max(0, row?.oldest ?? 0),
    inFlight: Number(row?.in_flight ?? 0),
    deadLettered: Number(row?.dead ?? 0),
    published: Number(row?.published ?? 0),
  };
}
