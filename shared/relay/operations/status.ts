/** Backlog figures for `outbox status`, `npm start` and the monitor's metrics. */
import { countFromDatabase, type Queryable } from '../../platform/index.ts';
import { countOutbox } from './sql/index.ts';

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
  /**
   * Failed inbox events (`inbox_failed`, all consumers of this database together) whose last
   * attempt is older than {@link INBOX_FAILED_SETTLE_SECONDS} and that no delivery applied since:
   * Lambda's retries are over, and the event is in the function's on-failure destination, or, if
   * a wrapper answered for the failure, nowhere else (`outbox inbox failed list`).
   */
  inboxFailed: number;
}

/**
 * How old a failed inbox event's last attempt must be to count as failed, seconds: past Lambda's
 * asynchronous retries (about 1 and 2 minutes apart; LAMBDA_ASYNC_RETRY_WINDOW_SECONDS, 180), so
 * that an event still being retried (a wait-for-gap wait, a passing outage) does not count.
 */
export const INBOX_FAILED_SETTLE_SECONDS = 300;

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
  const row = await countOutbox(sql, includePublished, INBOX_FAILED_SETTLE_SECONDS);
  return {
    pending: countFromDatabase(row?.pending, 'pending'),
    oldestPendingAgeSeconds: Math.max(0, row?.oldest ?? 0),
    inFlight: countFromDatabase(row?.in_flight, 'in flight'),
    deadLettered: countFromDatabase(row?.dead, 'dead-lettered'),
    published: row?.published == null ? -1 : countFromDatabase(row.published, 'published'),
    inboxParked: countFromDatabase(row?.inbox_parked, 'inbox parked'),
    inboxFailed: countFromDatabase(row?.inbox_failed, 'inbox failed'),
  };
}
