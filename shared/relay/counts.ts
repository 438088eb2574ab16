/** What passes did, counted. */

/** Counts of one pass, or of a whole run. */
export interface RelayCounts {
  /** Rows claimed (heads and their successors). */
  claimed: number;
  /** Rows accepted by the bus and marked published. */
  published: number;
  /** Rows that failed with a retryable error and were scheduled for a later attempt. */
  retried: number;
  /**
   * Of the retried rows, those that met back-pressure (a throttled entry, or a request that failed
   * as a whole: network, timeout, HTTP 5xx): their attempt was given back.
   */
  backPressure: number;
  /** Rows dead-lettered (permanent error, or attempts exhausted). */
  deadLettered: number;
  /** Rows claimed but not sent (an earlier event of their aggregate failed, or the pass ran short of time). */
  released: number;
  /** Rows whose lease had passed to another relay when this one tried to write their outcome. */
  leaseLost: number;
  /** Entries refused with ThrottlingException. */
  throttled: number;
  /** PutEvents requests sent. */
  putEventsCalls: number;
  /** Time spent in PutEvents calls (SDK retries included), summed over calls, ms. */
  putEventsMs: number;
  /** Lease renewals of passes slower than a quarter of their lease. */
  leaseRenewals: number;
}

/** A zeroed {@link RelayCounts}. */
export function emptyCounts(): RelayCounts {
  return {
    claimed: 0,
    published: 0,
    retried: 0,
    backPressure: 0,
    deadLettered: 0,
    released: 0,
    leaseLost: 0,
    throttled: 0,
    putEventsCalls: 0,
    putEventsMs: 0,
    leaseRenewals: 0,
  };
}

/** Adds `from` into `into`, field by field. */
export function addCounts(into: RelayCounts, from: RelayCounts): void {
  for (const key of Object.keys(into) as (keyof RelayCounts)[]) into[key] += from[key];
}
