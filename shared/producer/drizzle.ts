/**
 * Enqueue with Drizzle ORM: the same API as the package's main entry point, for a Drizzle
 * Postgres database or transaction (node-postgres or postgres.js driver). Entry point
 * `outbox-relay-aws/drizzle`.
 *
 * ```ts
 * import { enqueue } from 'outbox-relay-aws/drizzle';
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id: '8842', total: 120 });
 *   await enqueue(tx, { type: 'OrderPlaced', source: 'shop.orders', aggregateType: 'order',
 *                       aggregateId: '8842', payload: { total: 120 } });
 * });
 * ```
 *
 * Locks and errors are those of the main `enqueue` (it calls the same database functions:
 * `outbox_enqueue` for one event without an idempotency key, one function call instead of two;
 * `outbox_enqueue_many` for anything else): the aggregate's sequence lock is held until the
 * transaction ends.
 */
import { type SQL, sql } from 'drizzle-orm';
import { type EnqueuedOneRow, type EnqueuedRow, producerFor } from './statement.ts';
import type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';

export {
  OutboxConflictError,
  OutboxDeadlockError,
  OutboxError,
  OutboxSchemaError,
  OutboxValidationError,
} from '../platform/errors.ts';
export type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';

/**
 * What the adapter needs of Drizzle: `execute(sql)`, which a `PgDatabase` and the `tx` of
 * `db.transaction(async (tx) => …)` both have. Pass the `tx` to make the event part of it.
 */
export interface DrizzleExecutor {
  execute(query: SQL): PromiseLike<unknown>;
}

/** The rows of a result: node-postgres returns { rows }, postgres.js an array of rows. */
const rowsOf = (result: unknown): unknown[] =>
  Array.isArray(result) ? result : (result as { rows: unknown[] }).rows;

const producer = producerFor<DrizzleExecutor>({
  one: async (tx, p) =>
    rowsOf(
      await tx.execute(sql`select event_id, sequence::text as sequence, duplicate
      from outbox.outbox_enqueue(event_type => ${p.eventType}::text, source => ${p.source}::text,
        aggregate_type => ${p.aggregateType}::text, aggregate_id => ${p.aggregateId}::text,
        payload => ${p.payload}::text::jsonb, trace_header => ${p.traceHeader}::text,
        max_entry_bytes => ${p.maxEntryBytes}::integer)`),
    ) as EnqueuedOneRow[],
  // sql.param keeps each array one bound parameter (a bare array would expand into a list).
  many: async (tx, p) =>
    rowsOf(
      await tx.execute(sql`select ord, event_id, aggregate_type, aggregate_id, sequence::text as sequence, duplicate
      from outbox.outbox_enqueue_many(
        ${sql.param(p.eventTypes)}::text[], ${sql.param(p.sources)}::text[],
        ${sql.param(p.aggregateTypes)}::text[], ${sql.param(p.aggregateIds)}::text[],
        ${sql.param(p.payloads)}::text[]::jsonb[], ${sql.param(p.idempotencyKeys)}::text[],
        ${sql.param(p.traceHeaders)}::text[], ${p.maxEntryBytes}::integer)`),
    ) as EnqueuedRow[],
});

/**
 * Enqueues one event in a Drizzle transaction.
 * @throws {OutboxValidationError} naming the bad field; nothing was sent to the database
 * @throws {OutboxDeadlockError} when Postgres aborted the transaction to break a deadlock: retry the whole transaction
 * @throws {OutboxConflictError} under REPEATABLE READ or SERIALIZABLE, when a concurrent transaction committed one of its idempotency keys after this one's snapshot: retry the whole transaction
 * @throws {OutboxSchemaError} when the database has no outbox schema, or an older one (SQLSTATE 42883 for `outbox_enqueue` or `outbox_enqueue_many`): run `outbox migrate`
 * @throws Drizzle's error otherwise
 */
export const enqueue: (
  tx: DrizzleExecutor,
  event: OutboxEvent,
  options?: EnqueueOptions,
) => Promise<EnqueueResult> = producer.enqueue;

/**
 * Enqueues several events in a Drizzle transaction with one statement; results in input order.
 * @throws {OutboxValidationError} with `index` set to the first bad event's position
 * @throws {OutboxDeadlockError} see {@link enqueue}
 */
export const enqueueMany: (
  tx: DrizzleExecutor,
  events: readonly OutboxEvent[],
  options?: EnqueueOptions,
) => Promise<EnqueueResult[]> = producer.enqueueMany;
