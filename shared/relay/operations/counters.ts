/**
 * After a point-in-time restore of the producer's database (docs/operations.md#after-a-point-in-time-restore).
 *
 * The per-aggregate counters live in the database, so a restore rolls them back with everything
 * else: the next events of an aggregate reuse sequences its consumers have already seen, published
 * before the restore and lost with it. An `ignore-stale` consumer records them `stale` (never
 * applied), a `wait-for-gap` one applies them `late`. {@link advanceCounters} moves every counter
 * (and every per-type count behind `typeSequence`) `by` further, so that what is enqueued next
 * numbers above anything handed out before, provided `by` is at least the number of sequences any
 * one aggregate was handed after the restore point: the events published in that time bound it.
 *
 * It works in batches in key order, one short transaction each, alongside producers: a batch
 * waits a moment for a counter a producer's transaction holds, gives way (and is retried) rather
 * than make the producer wait or deadlock. Running it again adds `by` again: harmless, sequences
 * only jump further. Not covered: an aggregate with no counter row (first written after the
 * restore point) starts at 1 again, and so does, in every aggregate, an event type the restored
 * database has never seen (neither in a counter nor in the outbox's rows).
 */
import type { Sql } from '../../platform/index.ts';
import {
  advanceCounterBatch,
  type CounterKey,
  countCounters,
  limitLockWait,
  selectKnownTypes,
} from './sql/index.ts';

/** The largest value of an int8, the counters' type. */
const MAX_INT8 = 9_223_372_036_854_775_807n;

/** Options of {@link advanceCounters}. */
export interface AdvanceCountersOptions {
  /** How far to move every counter: a whole number, at least 1. */
  by: number | bigint;
  /** Counters per transaction. Default 1000. */
  batchSize?: number;
  /** Count and report, change nothing. */
  dryRun?: boolean;
  /** Longest wait for one counter row a producer holds before the batch gives way, ms. Default 500. */
  lockTimeoutMs?: number;
  /** Batches given way in a row before the advance stops with an error. Default 120. */
  maxLockRetries?: number;
  /** Called after each batch. */
  progress?: (p: { advanced: number; total: number }) => void;
}

/** What {@link advanceCounters} did. */
export interface AdvanceCountersResult {
  by: string;
  /** Counters when it started. */
  total: number;
  /** Counters advanced (0 on a dry run). */
  advanced: number;
  batches: number;
  /** The highest sequence any counter had handed out when it started (int8 in decimal; "0" when none). */
  highestSequence: string;
  /** Batches that gave way to a producer holding a counter, and were run again. */
  lockRetries: number;
  durationMs: number;
  dryRun: boolean;
}

/** SQLSTATEs of a batch that gave way: lock_not_available (its lock_timeout), deadlock_detected. */
const GAVE_WAY = new Set(['55P03', '40P01']);

/**
 * Moves every per-aggregate counter `by` further.
 * @throws RangeError when `by` is not a whole number of at least 1, or would take a counter past
 *   the int8 range (nothing is changed then); the database's error when a batch fails otherwise,
 *   or keeps giving way (`maxLockRetries`): the batches before it stay advanced
 */
export async function advanceCounters(
  sql: Sql,
  options: AdvanceCountersOptions,
): Promise<AdvanceCountersResult> {
  const started = performance.now();
  const by =
    typeof options.by === 'bigint' ? options.by : Number.isSafeInteger(options.by) ? BigInt(options.by) : 0n;
  if (by < 1n) throw new RangeError(`by must be a whole number of at least 1 (got ${String(options.by)})`);
  const batchSize = options.batchSize ?? 1000;
  const lockTimeoutMs = options.lockTimeoutMs ?? 500;
  const maxLockRetries = options.maxLockRetries ?? 120;
  const totals = await countCounters(sql);
  const total = Number(totals?.total ?? 0);
  const highestSequence = totals?.highest ?? '0';
  if (BigInt(highestSequence) + by > MAX_INT8) {
    throw new RangeError(
      `by ${by} would take the highest counter (${highestSequence}) past the int8 range (${MAX_INT8}): choose a smaller step`,
    );
  }
  const result: AdvanceCountersResult = {
    by: String(by),
    total,
    advanced: 0,
    batches: 0,
    highestSequence,
    lockRetries: 0,
    durationMs: 0,
    dryRun: options.dryRun ?? false,
  };
  if (result.dryRun) {
    result.durationMs = Math.round(performance.now() - started);
    return result;
  }
  const knownTypes = JSON.stringify(
    Object.fromEntries((await selectKnownTypes(sql)).map((k) => [k.aggregate_type, k.types])),
  );
  let after: CounterKey | undefined;
  let givenWayInARow = 0;
  for (;;) {
    let batch: Awaited<ReturnType<typeof advanceCounterBatch>>;
    try {
      batch = await sql.begin(async (tx) => {
        await limitLockWait(tx, lockTimeoutMs);
        return advanceCounterBatch(tx, String(by), knownTypes, after, batchSize);
      });
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === undefined || !GAVE_WAY.has(code) || givenWayInARow >= maxLockRetries) throw error;
      givenWayInARow++;
      result.lockRetries++;
      // A moment for the producer to commit; its transaction is short.
      await new Promise((r) => setTimeout(r, Math.min(1_000, 50 * givenWayInARow)));
      continue;
    }
    givenWayInARow = 0;
    const advanced = Number(batch?.advanced ?? 0);
    if (advanced === 0 || batch?.last_type == null || batch.last_id == null) break;
    result.advanced += advanced;
    result.batches++;
    after = { aggregateType: batch.last_type, aggregateId: batch.last_id };
    options.progress?.({ advanced: result.advanced, total });
    if (advanced < batchSize) break;
  }
  result.durationMs = Math.round(performance.now() - started);
  return result;
}
