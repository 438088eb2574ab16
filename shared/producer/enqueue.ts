/**
 * Producer API: write events into the outbox inside the caller's own transaction, so an event
 * exists if and only if the business change committed (docs/guarantees.md#what-is-promised: "Atomic enqueue").
 *
 * ```ts
 * await sql.begin(async (tx) => {
 *   await tx`insert into orders ${tx(order)}`;
 *   await enqueue(tx, { type: 'OrderPlaced', source: 'shop.orders', aggregateType: 'order',
 *                       aggregateId: order.id, payload: { total: order.total } });
 * });
 * ```
 *
 * The write itself is a database function (migrations/007, 011), which every producer shares —
 * this API, the `pg`, Drizzle and Kysely adapters and raw SQL from other languages — so all of them
 * take the same locks in the same order and follow the same rules: `outbox_enqueue` for one event
 * without an idempotency key, `outbox_enqueue_many` for several events or any key. The first is
 * one function call where `outbox_enqueue_many` would make two (it hands such an event to
 * `outbox_enqueue`), which saves database CPU at every enqueue (statement.ts).
 *
 * Locks: each call takes, and holds until the caller's transaction commits or rolls back,
 * 1. a transaction-scoped advisory lock per idempotency key (sorted), then
 * 2. the row lock on each aggregate's sequence counter in `outbox_aggregate` (sorted by
 *    aggregate type and id).
 * A concurrent producer of the same aggregate (or key) waits until this transaction ends, which is
 * what makes sequences follow commit order. Two transactions that enqueue for the same aggregates
 * in opposite orders across calls deadlock; Postgres aborts one of them, which surfaces as an
 * {@link OutboxDeadlockError} (retry the whole transaction).
 */
import type { Queryable, Sql } from '../platform/db.ts';
import {
  type EnqueuedOneRow,
  type EnqueuedRow,
  type EnqueueOneParameters,
  type EnqueueParameters,
  producerFor,
} from './statement.ts';
import type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';

function inTransaction<T>(tx: Queryable, statement: (tx: Queryable) => Promise<T>): Promise<T> {
  // Called on a pool rather than in a transaction: make the call one transaction of its own, so the
  // idempotency locks and the sequence bump hold until the insert commits.
  if ('begin' in tx && typeof tx.begin === 'function')
    return (tx as Sql).begin((inner) => statement(inner)) as Promise<T>;
  return statement(tx);
}

function one(tx: Queryable, p: EnqueueOneParameters): Promise<readonly EnqueuedOneRow[]> {
  return inTransaction(
    tx,
    (q) => q<EnqueuedOneRow[]>`
      select event_id, sequence::text as sequence, duplicate
      from outbox.outbox_enqueue(
        event_type => ${p.eventType}::text, source => ${p.source}::text,
        aggregate_type => ${p.aggregateType}::text, aggregate_id => ${p.aggregateId}::text,
        payload => ${p.payload}::text::jsonb, trace_header => ${p.traceHeader}::text,
        max_entry_bytes => ${p.maxEntryBytes}::integer
      )`,
  );
}

function many(tx: Queryable, p: EnqueueParameters): Promise<readonly EnqueuedRow[]> {
  return inTransaction(
    tx,
    (q) => q<EnqueuedRow[]>`
      select ord, event_id, aggregate_type, aggregate_id, sequence::text as sequence, duplicate
      from outbox.outbox_enqueue_many(
        ${p.eventTypes}::text[], ${p.sources}::text[], ${p.aggregateTypes}::text[], ${p.aggregateIds}::text[],
        ${p.payloads}::text[]::jsonb[], ${p.idempotencyKeys}::text[], ${p.traceHeaders}::text[],
        ${p.maxEntryBytes}::integer
      )`,
  );
}

const producer = producerFor({ one, many });

/**
 * Enqueues one event in the caller's transaction. Validates first; nothing is written when it throws.
 * @param tx a transaction from `sql.begin` (a plain pool works too, but then the event is not atomic with anything)
 * @throws {OutboxValidationError} naming the bad field
 * @throws {OutboxDeadlockError} when Postgres aborted the transaction to break a deadlock (retry the transaction)
 * @throws {OutboxConflictError} under REPEATABLE READ or SERIALIZABLE, when a concurrent transaction committed one of its idempotency keys after this one's snapshot: retry the whole transaction
 * @throws {OutboxSchemaError} when the database has no outbox schema, or an older one (SQLSTATE 42883 for `outbox_enqueue` or `outbox_enqueue_many`): run `outbox migrate`
 * @throws the database's error (e.g. the caller's transaction was aborted)
 */
export const enqueue: (
  tx: Queryable,
  event: OutboxEvent,
  options?: EnqueueOptions,
) => Promise<EnqueueResult> = producer.enqueue;

/**
 * Enqueues several events in the caller's transaction with one statement. All are validated before
 * anything is written. Results come back in input order. Keys and aggregates are locked in sorted
 * order, so transactions that each enqueue all their events in one call cannot deadlock each other.
 * @throws {OutboxValidationError} with `index` set to the first bad event's position
 * @throws {OutboxDeadlockError} when Postgres aborted the transaction to break a deadlock (retry the transaction)
 */
export const enqueueMany: (
  tx: Queryable,
  events: readonly OutboxEvent[],
  options?: EnqueueOptions,
) => Promise<EnqueueResult[]> = producer.enqueueMany;
