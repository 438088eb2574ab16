/**
 * The inbox of a consumer in its own database (docs/consumer-operations.md#a-consumer-in-its-own-database):
 * the monitor Lambda prunes inbox tables and counts parked events only in the outbox's database,
 * so a consumer whose inbox lives elsewhere runs these on a schedule of its own, as `outbox inbox
 * prune` and `outbox inbox metrics`, or as {@link maintainInbox} in a scheduled function. They
 * touch only the `inbox_*` tables, with the monitor role's grants (`outbox_monitor`, created in
 * that database by `outbox migrate --roles`).
 */
import type { Queryable } from '../../platform/db.ts';
import { DEFAULT_METRIC_NAMESPACE, INBOX_METRIC_DIMENSION, MetricName } from '../../platform/names.ts';
import { pruneInboxBatch } from './parked-events.ts';
import { countInboxExpired, countInboxParked } from './sql/index.ts';

/** Options of {@link pruneInbox}. */
export interface PruneInboxOptions {
  /** Records and wait-for-gap rows older than this go (a chain's order state is kept). Seconds. */
  retentionSeconds: number;
  /** Rows per DELETE statement. */
  batchSize: number;
  /** Stop starting new batches after this long, ms. */
  timeBudgetMs: number;
  /** Count what would be deleted, delete nothing. */
  dryRun?: boolean;
}

/** What {@link pruneInbox} did (or, on a dry run, would do). */
export interface PruneInboxResult {
  /** Rows deleted (or to delete): records, superseded per-source chain rows, wait-for-gap rows and failure traces together. */
  deleted: number;
  /** On a dry run, the rows per table; undefined otherwise. */
  expired?: { messages: number; chains: number; gaps: number; failures: number };
  batches: number[];
  durationMs: number;
  /** False when the time budget ran out with rows still to delete. */
  complete: boolean;
  dryRun: boolean;
}

/**
 * Deletes the inbox's expired rows as the monitor does (records older than the retention but
 * parked ones, then superseded per-source chain rows, wait-for-gap rows and failure traces), and
 * nothing of the outbox: see `pruneInboxBatch`.
 * @throws database errors; batches already committed stay deleted
 */
export async function pruneInbox(sql: Queryable, options: PruneInboxOptions): Promise<PruneInboxResult> {
  const started = performance.now();
  const result: PruneInboxResult = {
    deleted: 0,
    batches: [],
    durationMs: 0,
    complete: true,
    dryRun: options.dryRun ?? false,
  };
  if (result.dryRun) {
    const row = await countInboxExpired(sql, options.retentionSeconds);
    const expired = {
      messages: Number(row?.messages ?? 0),
      chains: Number(row?.chains ?? 0),
      gaps: Number(row?.gaps ?? 0),
      failures: Number(row?.failures ?? 0),
    };
    result.expired = expired;
    result.deleted = expired.messages + expired.chains + expired.gaps + expired.failures;
  } else {
    for (;;) {
      if (performance.now() - started > options.timeBudgetMs) {
        result.complete = false;
        break;
      }
      const deleted = await pruneInboxBatch(sql, options.retentionSeconds, options.batchSize);
      if (deleted === 0) break;
      result.batches.push(deleted);
      result.deleted += deleted;
    }
  }
  result.durationMs = Math.round(performance.now() - started);
  return result;
}

/** One consumer's parked events, awaiting an operator (those being replayed included). */
export interface InboxParkedCount {
  consumer: string;
  parked: number;
}

/** The parked events of each named consumer, 0 for one with none, in the order given. */
export async function countParked(sql: Queryable, consumers: readonly string[]): Promise<InboxParkedCount[]> {
  const rows = await countInboxParked(sql, consumers);
  return rows.map((r) => ({ consumer: r.consumer, parked: Number(r.parked) }));
}

/**
 * The `InboxParkedCount` metric of each consumer as CloudWatch Embedded Metric Format, one JSON
 * line each: unit Count, the one dimension `consumer` (the dimension of the inbox's own metrics,
 * so a consumer's alarms and graphs sit together). CloudWatch Logs extracts the metric from any
 * log event in this form (a Lambda's stdout, a container's awslogs stream).
 * @param timestamp ms since the epoch; default now
 */
export function inboxParkedEmf(
  counts: readonly InboxParkedCount[],
  namespace: string = DEFAULT_METRIC_NAMESPACE,
  timestamp: number = Date.now(),
): string[] {
  return counts.map((c) =>
    JSON.stringify({
      _aws: {
        Timestamp: timestamp,
        CloudWatchMetrics: [
          {
            Namespace: namespace,
            Dimensions: [[INBOX_METRIC_DIMENSION]],
            Metrics: [{ Name: MetricName.InboxParked, Unit: 'Count' }],
          },
        ],
      },
      [INBOX_METRIC_DIMENSION]: c.consumer,
      [MetricName.InboxParked]: c.parked,
    }),
  );
}

/** Options of {@link maintainInbox}. */
export interface MaintainInboxOptions
  extends Omit<PruneInboxOptions, 'dryRun' | 'batchSize' | 'timeBudgetMs'> {
  /** The consumers (their inbox `consumer` option) whose parked events are counted. */
  consumers: readonly string[];
  /** Rows per DELETE statement. Default 1000. */
  batchSize?: number;
  /** Stop pruning after this long, ms. Default 20000. */
  timeBudgetMs?: number;
  /** CloudWatch namespace. Default `Outbox`. */
  namespace?: string;
  /** Where the EMF lines go. Default stdout. */
  write?: (line: string) => void;
}

/**
 * One scheduled run for a consumer's own database, what the monitor does for the outbox's: prunes
 * the inbox, then writes each consumer's `InboxParkedCount` as EMF. The count is written even when
 * pruning failed, and the pruning's error thrown afterwards, so an alarm keeps its data.
 * @throws the pruning's or the count's database error
 */
export async function maintainInbox(
  sql: Queryable,
  options: MaintainInboxOptions,
): Promise<{ pruned: PruneInboxResult | { error: string }; parked: InboxParkedCount[] }> {
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  let pruned: PruneInboxResult | { error: string };
  let pruneError: unknown;
  try {
    pruned = await pruneInbox(sql, {
      retentionSeconds: options.retentionSeconds,
      batchSize: options.batchSize ?? 1_000,
      timeBudgetMs: options.timeBudgetMs ?? 20_000,
    });
  } catch (error) {
    pruneError = error;
    pruned = { error: (error as Error).message };
  }
  const parked = await countParked(sql, options.consumers);
  for (const line of inboxParkedEmf(parked, options.namespace)) write(line);
  if (pruneError !== undefined) throw pruneError;
  return { pruned, parked };
}
