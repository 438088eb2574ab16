/**
 * What `outbox relay` tells the operator while it runs: events published per second, and every
 * distinct reason an event failed, with its count, as it happens. Without this the cause of a
 * failing relay (an unreachable endpoint, a refused entry) was only in the table's `last_error`.
 */
import type { RelayCounts, RelayFailure } from '../index.ts';

/** Totals of one failure reason. */
export interface FailureReason {
  /** `ErrorCode: message`, as recorded in `last_error`. */
  reason: string;
  count: number;
  retried: number;
  deadLettered: number;
}

/** Time between two progress reports, ms. */
export const REPORT_EVERY_MS = 1_000;
/** Distinct reasons kept; beyond this they are counted under one "other reasons" line. */
const MAX_REASONS = 20;

/**
 * Collects a relay run's outcomes and prints progress to `print` (stderr): a new failure reason at
 * once, and on each {@link RelayReport.tick} (once a second) the events published and the reasons
 * whose count grew.
 */
export class RelayReport {
  private readonly reasons = new Map<string, FailureReason & { reported: number }>();
  private lastReportAt: number;
  private publishedSinceReport = 0;
  private passesSinceReport = 0;

  private readonly print: (line: string) => void;
  private readonly options: { quiet?: boolean; now?: () => number };

  /**
   * @param print receives each progress line (the CLI passes stderr)
   * @param options.quiet prints nothing while running; the totals stay available for the summary
   */
  constructor(print: (line: string) => void, options: { quiet?: boolean; now?: () => number } = {}) {
    this.print = print;
    this.options = options;
    this.lastReportAt = this.now();
  }

  private now(): number {
    return this.options.now ? this.options.now() : performance.now();
  }

  /** Records a failed event; a reason seen for the first time is printed at once. */
  failure(f: RelayFailure): void {
    let key = f.reason;
    if (!this.reasons.has(key) && this.reasons.size >= MAX_REASONS) key = 'other reasons';
    let r = this.reasons.get(key);
    if (!r) {
      r = { reason: key, count: 0, retried: 0, deadLettered: 0, reported: 0 };
      this.reasons.set(key, r);
    }
    r.count++;
    if (f.deadLettered) r.deadLettered++;
    else r.retried++;
    if (r.count === 1 && !this.options.quiet) {
      this.print(`relay: publish failed: ${key} (${f.deadLettered ? 'dead-lettered' : 'will retry'})`);
      r.reported = 1;
    }
  }

  /** Records a pass that claimed something. */
  pass(counts: RelayCounts): void {
    this.publishedSinceReport += counts.published;
    this.passesSinceReport++;
  }

  /**
   * Prints what changed since the last report: the events published (when a pass ran) and each
   * reason whose count grew. The CLI calls it once a second.
   */
  tick(now = this.now()): void {
    const seconds = (now - this.lastReportAt) / 1000;
    if (!this.options.quiet) {
      if (this.passesSinceReport > 0) {
        this.print(`relay: ${this.publishedSinceReport} published in the last ${seconds.toFixed(1)} s`);
      }
      for (const r of this.reasons.values()) {
        if (r.count === r.reported) continue;
        this.print(`relay: ${describe(r)} so far: ${r.reason}`);
        r.reported = r.count;
      }
    }
    this.lastReportAt = now;
    this.publishedSinceReport = 0;
    this.passesSinceReport = 0;
  }

  /** Every reason with its totals, most frequent first. */
  failures(): FailureReason[] {
    return [...this.reasons.values()]
      .map(({ reported: _, ...r }) => r)
      .sort((a, b) => b.count - a.count || a.reason.localeCompare(b.reason));
  }

  /** Lines for the final summary: one per reason, e.g. `3 failed (3 retried): ThrottlingException: …`. */
  summaryLines(): string[] {
    return this.failures().map((r) => `  ${describe(r)}: ${r.reason}`);
  }
}

function describe(r: FailureReason): string {
  const parts = [
    r.retried > 0 ? `${r.retried} retried` : '',
    r.deadLettered > 0 ? `${r.deadLettered} dead-lettered` : '',
  ]
    .filter(Boolean)
    .join(', ');
  return `${r.count} failed (${parts})`;
}
