/**
 * Pruning (README, Guarantees: "Pruning"): deletes published rows older than their retention, and dead-lettered rows
 * only under their own, longer retention and once they no longer hold their aggregate back (see
 * `expiredDeadLetter`). It never touches an unpublished live row. It works in
 * bounded batches (one short statement each, touching only rows no relay works on)
 * within a time budget; what is left is picked up by the next run, oldest first.
 *
 * Idempotency keys (`outbox_idempotency_key`) have a retention of their own, longer than the
 * published rows' by default: a key is forgotten only when it is older than that retention *and*
 * its event has left the outbox, so the idempotency window never ends when a row is pruned.
 */
import type { Queryable } from '../platform/index.ts';
import { pruneInboxBatch } from './inbox.ts';

/**
 * A dead letter past its retention that may go: neither published nor holding its aggregate back.
 * One that is not discarded is kept while it may hold back an event of its aggregate: under
 * `block` every event after it waits for an operator to replay or discard it, including events
 * enqueued later, and deleting it would let the claim publish them and leave nothing to replay.
 * Prune does not know the relay's policy, so it keeps a dead letter that is not discarded until
 * its aggregate has moved past it: a later event was enqueued (the per-aggregate counter, which
 * outlives pruned rows, says so) and none of the later events is still to publish. Under
 * `continue` that happens once the events behind it are published; a dead letter that is the last
 * event of its aggregate stays until an operator acts or a later event goes out. `d` is the dead
 * letter's alias; the checks read the counter's primary key and `outbox_unfinished_by_aggregate_idx`.
 */
function expiredDeadLetter(sql: Queryable, retentionSeconds: number) {
  return sql`d.dead_lettered_at < now() - make_interval(secs => ${retentionSeconds})
    and d.published_at is null
    and (d.discarded_at is not null or (
      exists (
        select from outbox_aggregate a
        where a.aggregate_type = d.aggregate_type and a.aggregate_id = d.aggregate_id
          and a.last_sequence > d.sequence)
      and not exists (
        select from outbox n
        where n.aggregate_type = d.aggregate_type and n.aggregate_id = d.aggregate_id
          and n.sequence > d.sequence and n.published_at is null and n.dead_lettered_at is null)))`;
}

/** Options of {@link prune}. */
export interface PruneOptions {
  /** Published rows older than this (by `published_at`) are deleted. Seconds. */
  publishedRetentionSeconds: number;
  /** Dead-lettered rows older than this (by `dead_lettered_at`) are deleted. Seconds. */
  deadLetterRetentionSeconds: number;
  /**
   * Inbox records (`inbox_message`, but parked events awaiting an operator) older than this are
   * deleted, and with them the order state (`inbox_aggregate`, `inbox_gap`) untouched for as long
   * (see pruneInboxBatch). Seconds. Keep it well above EventBridge's retry window (24 hours) and
   * the on-failure destination's retention: a duplicate arriving after its record is gone would be
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
  /** Inbox records and order-state rows deleted. */
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
export async function prune(sql: Queryable, o: PruneOptions): Promise<PruneResult> {
  const started = performance.now();
  const result: PruneResult = {
    publishedDeleted: 0,
    deadLettersDeleted: 0,
    inboxDeleted: 0,
    idempotencyKeysDeleted: 0,
    batches: [],
    durationMs: 0,
    complete: true,
    dryRun: o.dryRun ?? false,
  };
  if (o.dryRun) {
    const [row] = await sql<{ published: string; dead: string }[]>`
      select
        (select count(*) from outbox where published_at < now() - make_interval(secs => ${o.publishedRetentionSeconds})) as published,
        (select count(*) from outbox d where ${expiredDeadLetter(sql, o.deadLetterRetentionSeconds)}) as dead`;
    result.publishedDeleted = Number(row?.published ?? 0);
    result.deadLettersDeleted = Number(row?.dead ?? 0);
    if (o.idempotencyKeyRetentionSeconds !== undefined) {
      // Keys whose event would be gone after this run: already gone, or about to be pruned.
      const [keys] = await sql<{ n: string }[]>`
        select count(*) as n from outbox_idempotency_key k
        where k.created_at < now() - make_interval(secs => ${o.idempotencyKeyRetentionSeconds})
          and not exists (
            select from outbox o where o.id = k.outbox_id
              and not coalesce(o.published_at < now() - make_interval(secs => ${o.publishedRetentionSeconds}), false)
              and not exists (
                select from outbox d where d.id = o.id and ${expiredDeadLetter(sql, o.deadLetterRetentionSeconds)}))`;
      result.idempotencyKeysDeleted = Number(keys?.n ?? 0);
    }
    result.durationMs = Math.round(performance.now() - started);
    return result;
  }
  // Keys go after the outbox rows, so a key whose row was pruned in this run can go in it too.
  const kinds = [
    'published',
    'dead',
    ...(o.inboxRetentionSeconds === undefined ? [] : (['inbox'] as const)),
    ...(o.idempotencyKeyRetentionSeconds === undefined ? [] : (['keys'] as const)),
  ] as const;
  for (const kind of kinds) {
    for (;;) {
      if (performance.now() - started > o.timeBudgetMs) {
        result.complete = false;
        result.durationMs = Math.round(performance.now() - started);
        return result;
      }
      const deleted =
        kind === 'published'
          ? await deletePublished(sql, o)
          : kind === 'dead'
            ? await deleteDeadLetters(sql, o)
            : kind === 'inbox'
              ? await pruneInboxBatch(sql, o.inboxRetentionSeconds ?? 0, o.batchSize)
              : await deleteIdempotencyKeys(sql, o);
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

// The deletes lock nothing ahead (no FOR UPDATE, which would need UPDATE privilege the monitor's
// role does not have, and should not: it could then mark rows published). The conditions are
// repeated on the DELETE itself because Postgres re-checks only the outer WHERE against a row that
// changed while the DELETE waited for it: a dead letter replayed in that instant (pending again)
// is then skipped, not deleted. Rows this old are written by nobody else, so the waits are rare
// and short, and the relay never waits on them (it locks only pending rows).

async function deletePublished(sql: Queryable, o: PruneOptions): Promise<number> {
  // Oldest first by id, the primary key: expired published rows form (roughly) a prefix of it.
  const r = await sql`
    delete from outbox
    where id = any(array(
        select id from outbox
        where published_at < now() - make_interval(secs => ${o.publishedRetentionSeconds})
        order by id
        limit ${o.batchSize}
      ))
      and published_at < now() - make_interval(secs => ${o.publishedRetentionSeconds})`;
  return r.count;
}

async function deleteDeadLetters(sql: Queryable, o: PruneOptions): Promise<number> {
  const r = await sql`
    delete from outbox d
    where d.id = any(array(
        select d.id from outbox d
        where ${expiredDeadLetter(sql, o.deadLetterRetentionSeconds)}
        order by d.dead_lettered_at, d.id
        limit ${o.batchSize}
      ))
      and ${expiredDeadLetter(sql, o.deadLetterRetentionSeconds)}`;
  return r.count;
}

async function deleteIdempotencyKeys(sql: Queryable, o: PruneOptions): Promise<number> {
  // No producer writes an expired key (a repeat of it reads it and writes nothing), so the only
  // race is a repeat arriving while the key is deleted: it then enqueues anew, which is what the
  // window's end means. The key row records its event's row id (outbox_id, migration 011; NULL
  // for a key whose event had left the outbox before it), found through the primary key.
  const r = await sql`
    delete from outbox_idempotency_key k
    using (
      select idempotency_key from outbox_idempotency_key old
      where created_at < now() - make_interval(secs => ${o.idempotencyKeyRetentionSeconds ?? 0})
        and not exists (select from outbox o where o.id = old.outbox_id)
      order by created_at
      limit ${o.batchSize}
    ) expired
    where k.idempotency_key = expired.idempotency_key
      and k.created_at < now() - make_interval(secs => ${o.idempotencyKeyRetentionSeconds ?? 0})
      and not exists (select from outbox o where o.id = k.outbox_id)`;
  return r.count;
}
