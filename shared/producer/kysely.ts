/**
 * Enqueue with Kysely: the same API as the package's main entry point, for a Kysely database or
 * transaction (any Postgres dialect: Kysely's own `PostgresDialect` on node-postgres, or
 * `kysely-postgres-js` on postgres.js). Entry point `outbox-relay-aws/kysely`.
 *
 * ```ts
 * import { enqueue } from 'outbox-relay-aws/kysely';
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id: '8842', total: 120 }).execute();
 *   await enqueue(trx, { type: 'OrderPlaced', source: 'shop.orders', aggregateType: 'order',
 *                        aggregateId: '8842', payload: { total: 120 } });
 * });
 * ```
 *
 * Locks and errors are those of the main `enqueue` (it calls the same database functions:
 * `outbox_enqueue` for one event without an idempotency key, one function call instead of two;
 * `outbox_enqueue_many` for anything else): the aggregate's sequence lock is held until the
 * transaction ends.
 */
import { type Kysely, sql } from 'kysely';
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
 * What the adapter needs of Kysely: what `sql\`…\`.execute(db)` runs on, which a `Kysely<DB>` and
 * the `trx` of `db.transaction().execute(async (trx) => …)` both are, whatever your `DB` type.
 * Pass the `trx` to make the event part of it; on the `Kysely` itself, each call is a transaction
 * of its own, atomic with nothing else.
 */
export type KyselyExecutor = Pick<Kysely<unknown>, 'getExecutor'>;

// Kysely's sql tag binds each interpolated value as one parameter, arrays included.
const producer = producerFor<KyselyExecutor>({
  one: async (db, p) =>
    (
      await sql<EnqueuedOneRow>`select event_id, sequence::text as sequence, duplicate
      from outbox.outbox_enqueue(event_type => ${p.eventType}::text, source => ${p.source}::text,
        aggregate_type => ${p.aggregateType}::text, aggregate_id => ${p.aggregateId}::text,
        payload => ${p.payload}::text::jsonb, trace_header => ${p.traceHeader}::text,
        max_entry_bytes => ${p.maxEntryBytes}::integer)`.execute(db)
    ).rows,
  many: async (db, p) =>
    (
      await sql<EnqueuedRow>`select ord, event_id, aggregate_type, aggregate_id, sequence::text as sequence, duplicate
      from outbox.outbox_enqueue_many(
        ${p.eventTypes}::text[], ${p.sources}::text[], ${p.aggregateTypes}::text[], ${p.aggregateIds}::text[],
        ${p.payloads}::text[]::jsonb[], ${p.idempotencyKeys}::text[], ${p.traceHeaders}::text[],
        ${p.maxEntryBytes}::integer)`.execute(db)
    ).rows,
});

/**
 * Enqueues one event in a Kysely transaction.
 * @throws {OutboxValidationError} naming the bad field; nothing was sent to the database
 * @throws {OutboxDeadlockError} when Postgres aborted the transaction to break a deadlock: retry the whole transaction
 * @throws {OutboxConflictError} under REPEATABLE READ or SERIALIZABLE, when a concurrent transaction committed one of its idempotency keys after this one's snapshot: retry the whole transaction
 * @throws {OutboxSchemaError} when the database has no outbox schema, or an older one (SQLSTATE 42883 for `outbox_enqueue` or `outbox_enqueue_many`): run `outbox migrate`
 * @throws the driver's error otherwise
 */
export const enqueue: (
  db: KyselyExecutor,
  event: OutboxEvent,
  options?: EnqueueOptions,
) => Promise<EnqueueResult> = producer.enqueue;

/**
 * Enqueues several events in a Kysely transaction with one statement; results in input order.
 * @throws {OutboxValidationError} with `index` set to the first bad event's position
 * @throws {OutboxDeadlockError} see {@link enqueue}
 */
export const enqueueMany: (
  db: KyselyExecutor,
  events: readonly OutboxEvent[],
  options?: EnqueueOptions,
) => Promise<EnqueueResult[]> = producer.enqueueMany;
