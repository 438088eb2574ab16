/**
 * Pruning (docs/guarantees.md#what-is-promised: "Pruning"): deletes published rows older than their retention, and dead-lettered rows
 * only under their own, longer retention and once they no longer hold their aggregate back (see
 * `expiredDeadLetter` in sql/conditions.ts). It never touches an unpublished live row. It works in
 * bounded batches (one short statement each, touching only rows no relay works on)
 * within a time budget; what is left is picked up by the next run, oldest first.
 *
 * Idempotency keys (`outbox_idempotency_key`) have a retention of their own, longer than the
 * published rows' by default: a key is forgotten only when it is older than that retention *and*
 * its event has left the outbox, so the idempotency window never ends when a row is pruned.
 */

import { pruneInboxBatch } from '../../consumer/operations/index.ts';
import type { Queryable } from '../../platform/index.ts';
import {
  countExpiredKeys,
  countExpiredRows,
  deleteDeadLetters,
  deleteIdempotencyKeys,
  deletePublished,
} from './sql/index.ts';

/** Options of {@link prune}. */
export interface PruneOptions {
  /** Published rows older than this (by `published_at`) are deleted. Seconds. */
  publishedRetentionSeconds: number;
  /** Dead-lettered rows older than this (by `dead_lettered_at`) are deleted. Seconds. */
  deadLetterRetentionSeconds: number;
  /**
   * Inbox records (`inbox_message`, but parked events awaiting an operator) older than this are
   * deleted, and with them wait-for-gap rows (`inbox_gap`) and the traces of failed events
   * (`inbox_failed`) last attempted as long ago; each chain's order state (`inbox_aggregate`) is
   * kept (see pruneInboxBatch). Seconds. Keep it well above EventBridge's retry window (24 hours) and the
   * on-failure destination's retention: a duplicate arriving after its record is gone would be
   * applied again. Default: not pruned.
   */
  inboxRetentionSeconds?: number;
  /**
   * Idempotency keys older than this (by when their event was enqueued) are forgotten, once their
   * event has left the outbox: until then a repeat of the key is a no-op. Seconds. Default: never.
   */
  idempotencyKeyRetentionSeconds?: number;
  /** Rows per DELETE statement. */
  batchSize: number;
  /** Stop starting new batches after this long, ms. */
  timeBudgetMs: number;
  /** Count what would be deleted, delete nothing. */
  dryRun?: boolean;
}

/** What {@link prune} did. */
export interface PruneResult {
  publishedDeleted: number;
  deadLettersDeleted: number;
  /** Inbox records, order-state rows and failed events' traces deleted. */
  inboxDeleted: number;
  /** Idempotency keys forgotten. */
  idempotencyKeysDeleted: number;
  /** Rows deleted by each statement, in order (each ≤ batchSize). */
  batches: number[];
  durationMs: number;
  /** False when the time budget ran out with rows still to delete. */
  complete: boolean;
  dryRun: boolean;
}

/**
 * Deletes expired rows, batch by batch, until none is left or the time budget is spent.
 * @throws database errors; batches already committed stay deleted
 */
export async function prune(sql: Queryable, options: PruneOptions): Promise<PruneResult> {
  const started = performance.now();
  const result: PruneResult = {
    publishedDeleted: 0,
    deadLettersDeleted: 0,
    inboxDeleted: 0,
    idempotencyKeysDeleted: 0,
    batches: [],
    durationMs: 0,
    complete: true,
    dryRun: options.dryRun ?? false,
  };
  if (options.dryRun) {
    const row = await countExpiredRows(
      sql,
      options.publishedRetentionSeconds,
      options.deadLetterRetentionSeconds,
    );
    result.publishedDeleted = Number(row?.published ?? 0);
    result.deadLettersDeleted = Number(row?.dead ?? 0);
    if (options.idempotencyKeyRetentionSeconds !== undefined) {
      // Keys whose event would be gone after this run: already gone, or about to be pruned.
      const keys = await countExpiredKeys(
        sql,
        options.idempotencyKeyRetentionSeconds,
        options.publishedRetentionSeconds,
        options.deadLetterRetentionSeconds,
      );
      result.idempotencyKeysDeleted = Number(keys?.n ?? 0);
    }
    result.durationMs = Math.round(performance.now() - started);
    return result;
  }
  // Keys go after the outbox rows, so a key whose row was pruned in this run can go in it too.
  const kinds = [
    'published',
    'dead',
    ...(options.inboxRetentionSeconds === undefined ? [] : (['inbox'] as const)),
    ...(options.idempotencyKeyRetentionSeconds === undefined ? [] : (['keys'] as const)),
  ] as const;
  // The deletes (sql/delete-*.ts) lock nothing ahead (no FOR UPDATE, which would need UPDATE
  // privilege the monitor's role does not have, and should not: it could then mark rows
  // published). Their conditions are repeated on the DELETE itself because Postgres re-checks only
  // the outer WHERE against a row that changed while the DELETE waited for it: a dead letter
  // replayed in that instant (pending again) is then skipped, not deleted. Rows this old are
  // written by nobody else, so the waits are rare and short, and the relay never waits on them (it
  // locks only pending rows).
  for (const kind of kinds) {
    for (;;) {
      if (performance.now() - started > options.timeBudgetMs) {
        result.complete = false;
        result.durationMs = Math.round(performance.now() - started);
        return result;
      }
      const deleted =
        kind === 'published'
          ? await deletePublished(sql, options.publishedRetentionSeconds, options.batchSize)
          : kind === 'dead'
            ? await deleteDeadLetters(sql, options.deadLetterRetentionSeconds, options.batchSize)
            : kind === 'inbox'
              ? await pruneInboxBatch(sql, options.inboxRetentionSeconds ?? 0, options.batchSize)
              : await deleteIdempotencyKeys(
                  sql,
                  options.idempotencyKeyRetentionSeconds ?? 0,
                  options.batchSize,
                );
      if (deleted === 0) break;
      result.batches.push(deleted);
      if (kind === 'published') result.publishedDeleted += deleted;
      else if (kind === 'dead') result.deadLettersDeleted += deleted;
      else if (kind === 'inbox') result.inboxDeleted += deleted;
      else result.idempotencyKeysDeleted += deleted;
    }
  }
  result.durationMs = Math.round(performance.now() - started);
  return result;
}
