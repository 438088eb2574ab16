/** Backlog figures for `outbox status`, `npm start` and the monitor's metrics. */
import { INBOX_FAILED_SETTLE_SECONDS } from '../../consumer/operations/index.ts';
import { countFromDatabase, type Queryable } from '../../platform/index.ts';
import { measureClaimable, relaysWanted, type ScaleOutSettings } from './scale-out.ts';
import { countInBackoff, countOutbox, selectHoldingDeadLetters, selectLastErrors } from './sql/index.ts';

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
  /**
   * Failed inbox events whose last attempt is more recent than that: Lambda may still be retrying
   * them. Not in `inboxFailed` (nor in the monitor's `InboxFailedCount`), but listed by
   * `outbox inbox failed list`, which lists every trace.
   */
  inboxFailedRetrying: number;
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
  const row = await countOutbox(sql, includePublished, INBOX_FAILED_SETTLE_SECONDS);
  return {
    pending: countFromDatabase(row?.pending, 'pending'),
    oldestPendingAgeSeconds: Math.max(0, row?.oldest ?? 0),
    inFlight: countFromDatabase(row?.in_flight, 'in flight'),
    deadLettered: countFromDatabase(row?.dead, 'dead-lettered'),
    published: row?.published == null ? -1 : countFromDatabase(row.published, 'published'),
    inboxParked: countFromDatabase(row?.inbox_parked, 'inbox parked'),
    inboxFailed: countFromDatabase(row?.inbox_failed, 'inbox failed'),
    inboxFailedRetrying: countFromDatabase(row?.inbox_failed_retrying, 'inbox failed, retrying'),
  };
}

/** A dead letter that holds its aggregate back, and the pending events behind it. */
export interface HoldingDeadLetter {
  /** The dead letter's row id (`outbox dead-letters show <id>`). */
  id: string;
  eventId: string;
  aggregateType: string;
  aggregateId: string;
  /** The dead letter's per-aggregate sequence. */
  sequence: string;
  /** Pending events of the aggregate behind it. */
  heldBack: number;
}

/** Why pending rows are not being claimed, and what the monitor would do about the backlog. */
export interface BacklogDetail {
  /**
   * Pending events held back behind a dead letter: their aggregate's lowest row that holds it back
   * is a dead letter not discarded. Under the `block` policy they wait for `outbox dead-letters
   * replay` or `discard`; under `continue` the relay publishes them anyway, so they show here only
   * until its next pass.
   */
  heldBack: number;
  /** The dead letters holding events back, most events behind first, at most {@link HELD_BACK_LISTED}. */
  heldBackBy: HoldingDeadLetter[];
  /** Pending events waiting out a backoff after a failed attempt (not leased, an error recorded). */
  inBackoff: number;
  /**
   * Pending events whose last attempt failed (an error recorded): the relay is retrying them,
   * whether they wait out a backoff or are leased again. With no route to the bus, every pending
   * event that was tried is here, with a timeout for its error (docs/operations.md#lag).
   */
  retrying: number;
  /** The errors their last attempts failed with (`last_error`), most events first, at most {@link LAST_ERRORS_LISTED}. */
  lastErrors: { error: string; count: number }[];
  /** What the monitor would scale the relays to for the claimable work now. */
  scaleOut: {
    /** Relays the monitor would want running, the scheduled one included: 1 to `maxRelays`, 1 while the bus throttles. */
    relays: number;
    /** `OUTBOX_MAX_RELAYS` as given (1: scale-out is off). */
    maxRelays: number;
    /** `OUTBOX_BACKLOG_PER_RELAY` as given. */
    backlogPerRelay: number;
    /** Rows a claim could take now, counted up to `(maxRelays − 1) × backlogPerRelay + 1`. */
    claimable: number;
    /** Under per-aggregate ordering, the aggregates of those rows whose head is claimable, up to `maxRelays`. */
    heads?: number;
    /** The bus is throttling the relays: the monitor then starts none. */
    throttled: boolean;
  };
}

/** Dead letters listed in {@link BacklogDetail.heldBackBy}, at most. */
export const HELD_BACK_LISTED = 10;
/** Errors listed in {@link BacklogDetail.lastErrors}, at most. */
export const LAST_ERRORS_LISTED = 3;

/**
 * Reads why pending rows wait and what the monitor would scale to, for `outbox status` (the
 * monitor leaves it out: it measures the claimable work itself, and the rest is for an operator).
 * The held-back count reads the dead letters and the rows behind them, the backoff count the
 * pending rows not yet due, the retrying count and its errors the pending rows with an error, the scale-out the claimable rows up to what `maxRelays` needs.
 * @param settings the monitor's scale-out settings (`OUTBOX_MAX_RELAYS`, `OUTBOX_BACKLOG_PER_RELAY`,
 *   the relay's `OUTBOX_ORDERING` and `OUTBOX_DEAD_LETTER_POLICY`)
 */
export async function getBacklogDetail(
  sql: Queryable,
  settings: Pick<ScaleOutSettings, 'maxRelays' | 'backlogPerRelay' | 'ordering' | 'deadLetterPolicy'>,
): Promise<BacklogDetail> {
  const holding = await selectHoldingDeadLetters(sql);
  const backoff = await countInBackoff(sql);
  const errors = await selectLastErrors(sql, LAST_ERRORS_LISTED);
  const work = await measureClaimable(sql, settings);
  const heldBackBy = holding.map((r) => ({
    id: r.id,
    eventId: r.event_id,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    sequence: r.sequence,
    heldBack: countFromDatabase(r.behind, 'held back'),
  }));
  return {
    heldBack: heldBackBy.reduce((n, r) => n + r.heldBack, 0),
    heldBackBy: heldBackBy.slice(0, HELD_BACK_LISTED),
    inBackoff: countFromDatabase(backoff?.in_backoff, 'in backoff'),
    retrying: countFromDatabase(errors[0]?.total ?? '0', 'retrying'),
    lastErrors: errors.map((e) => ({ error: e.error, count: countFromDatabase(e.n, 'last errors') })),
    scaleOut: {
      relays: work.throttled ? 1 : relaysWanted(work, settings),
      maxRelays: settings.maxRelays,
      backlogPerRelay: settings.backlogPerRelay,
      ...work,
    },
  };
}
