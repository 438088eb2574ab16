/**
 * Failed events counted by reason, for what tells an operator why events do not leave: the
 * `outbox relay` command's progress lines (cli/relay-report.ts) and the relay Lambda's log and
 * invocation summary (functions/relay/relay-handler.ts).
 */
import type { RelayFailure } from './pass-options.ts';

/** Totals of one failure reason. */
export interface FailureReason {
  /** `ErrorCode: message`, as recorded in `last_error`; `other reasons` past the distinct ones kept. */
  reason: string;
  /** Failed events (an event that failed twice counts twice). */
  count: number;
  /** Of them, left pending for a retry. */
  retried: number;
  /** Of them, dead-lettered. */
  deadLettered: number;
}

/** A tally of failed events by reason, keeping at most `kept` distinct reasons. */
export class FailureReasons {
  private readonly byReason = new Map<string, FailureReason>();
  private readonly kept: number;

  /** @param kept distinct reasons counted apart; beyond them they count under `other reasons` */
  constructor(kept: number) {
    this.kept = kept;
  }

  /** Counts one failed event; `first` is true when its reason (or `other reasons`) is new. */
  add(f: RelayFailure): { totals: FailureReason; first: boolean } {
    const reason = this.byReason.has(f.reason) || this.byReason.size < this.kept ? f.reason : 'other reasons';
    let totals = this.byReason.get(reason);
    const first = totals === undefined;
    if (!totals) {
      totals = { reason, count: 0, retried: 0, deadLettered: 0 };
      this.byReason.set(reason, totals);
    }
    totals.count++;
    if (f.deadLettered) totals.deadLettered++;
    else totals.retried++;
    return { totals, first };
  }

  /** Every reason with its totals (copies), most frequent first, then by reason. */
  list(): FailureReason[] {
    return [...this.byReason.values()]
      .map((r) => ({ ...r }))
      .sort((a, b) => b.count - a.count || a.reason.localeCompare(b.reason));
  }
}
