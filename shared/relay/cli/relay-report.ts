/**
 * What `outbox relay` tells the operator while it runs: events published per second, and every
 * distinct reason an event failed, with its count, as it happens. Without this the cause of a
 * failing relay (an unreachable endpoint, a refused entry) was only in the table's `last_error`.
 */
import { type FailureReason, FailureReasons, type RelayCounts, type RelayFailure } from '../index.ts';

export type { FailureReason };

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
  private readonly reasons = new FailureReasons(MAX_REASONS);
  /** Each reason's count when it was last printed. */
  private readonly reported = new Map<string, number>();
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
    const { totals, first } = this.reasons.add(f);
    if (first && !this.options.quiet) {
      this.print(
        `relay: publish failed: ${totals.reason} (${f.deadLettered ? 'dead-lettered' : 'will retry'})`,
      );
      this.reported.set(totals.reason, 1);
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
      for (const r of this.reasons.list()) {
        if (r.count === (this.reported.get(r.reason) ?? 0)) continue;
        this.print(`relay: ${describe(r)} so far: ${r.reason}`);
        this.reported.set(r.reason, r.count);
      }
    }
    this.lastReportAt = now;
    this.publishedSinceReport = 0;
    this.passesSinceReport = 0;
  }

  /** Every reason with its totals, most frequent first. */
  failures(): FailureReason[] {
    return this.reasons.list();
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
