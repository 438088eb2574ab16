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
 * Locks and errors are those of the main `enqueue` (it calls the same database function,
 * `outbox_enqueue_many`): the aggregate's sequence lock is held until the transaction ends.
 */
import { type Kysely, sql } from 'kysely';
import { type EnqueuedRow, producerFor } from './statement.ts';
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

const producer = producerFor<KyselyExecutor>(async (db, p) => {
  // Kysely's sql tag binds each interpolated value as one parameter, arrays included.
  const result =
    await sql<EnqueuedRow>`select ord, event_id, aggregate_type, aggregate_id, sequence::text as sequence, duplicate
    from outbox_enqueue_many(
      ${p.eventTypes}::text[], ${p.sources}::text[], ${p.aggregateTypes}::text[], ${p.aggregateIds}::text[],
      ${p.payloads}::text[]::jsonb[], ${p.idempotencyKeys}::text[], ${p.traceHeaders}::text[],
      ${p.maxEntryBytes}::integer)`.execute(db);
  return result.rows;
});

/**
 * Enqueues one event in a Kysely transaction.
 * @throws {OutboxValidationError} naming the bad field; nothing was sent to the database
 * @throws {OutboxDeadlockError} when Postgres aborted the transaction to break a deadlock: retry the whole transaction
 * @throws {OutboxConflictError} under REPEATABLE READ or SERIALIZABLE, when a concurrent transaction committed one of its idempotency keys after this one's snapshot: retry the whole transaction
 * @throws {OutboxSchemaError} when the database has no outbox schema, or an older one (SQLSTATE 42883 for `outbox_enqueue_many`): run `outbox migrate`
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
