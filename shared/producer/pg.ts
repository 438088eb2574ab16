/**
 * Enqueue with node-postgres (`pg`): the same API as the package's main entry point, for a
 * `PoolClient` (or `Client`) inside the caller's transaction. Entry point `outbox-relay-aws/pg`.
 *
 * ```ts
 * import { enqueue } from 'outbox-relay-aws/pg';
 * const client = await pool.connect();
 * try {
 *   await client.query('begin');
 *   await client.query('insert into orders (id, total) values ($1, $2)', ['8842', 120]);
 *   await enqueue(client, { type: 'OrderPlaced', source: 'shop.orders', aggregateType: 'order',
 *                           aggregateId: '8842', payload: { total: 120 } });
 *   await client.query('commit');
 * } catch (error) {
 *   await client.query('rollback');
 *   throw error;
 * } finally {
 *   client.release();
 * }
 * ```
 *
 * Locks and errors are those of the main `enqueue` (it calls the same database functions:
 * `outbox_enqueue` for one event without an idempotency key, one function call instead of two;
 * `outbox_enqueue_many` for anything else): the aggregate's sequence lock is held until your
 * `commit` or `rollback`.
 */
import {
  ENQUEUE_MANY_SQL,
  ENQUEUE_ONE_SQL,
  type EnqueuedOneRow,
  type EnqueuedRow,
  positional,
  positionalOne,
  producerFor,
} from './statement.ts';
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
 * What the adapter needs of a node-postgres client: `query(text, values)`. A `pg.PoolClient` or
 * `pg.Client` on which you ran `begin` makes the event part of your transaction. (A `pg.Pool`
 * fits the type too, but then each call is a transaction of its own, atomic with nothing else.)
 */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

const producer = producerFor<PgQueryable>({
  one: async (client, p) => (await client.query(ENQUEUE_ONE_SQL, positionalOne(p))).rows as EnqueuedOneRow[],
  many: async (client, p) => (await client.query(ENQUEUE_MANY_SQL, positional(p))).rows as EnqueuedRow[],
});

/**
 * Enqueues one event on a node-postgres client, in its current transaction.
 * @throws {OutboxValidationError} naming the bad field; nothing was sent to the database
 * @throws {OutboxDeadlockError} when Postgres aborted the transaction to break a deadlock: roll back and retry the whole transaction
 * @throws {OutboxConflictError} under REPEATABLE READ or SERIALIZABLE, when a concurrent transaction committed one of its idempotency keys after this one's snapshot: retry the whole transaction
 * @throws {OutboxSchemaError} when the database has no outbox schema, or an older one (SQLSTATE 42883 for `outbox_enqueue` or `outbox_enqueue_many`): run `outbox migrate`
 * @throws the driver's error otherwise (e.g. the transaction was already aborted)
 */
export const enqueue: (
  client: PgQueryable,
  event: OutboxEvent,
  options?: EnqueueOptions,
) => Promise<EnqueueResult> = producer.enqueue;

/**
 * Enqueues several events on a node-postgres client with one statement; results in input order.
 * @throws {OutboxValidationError} with `index` set to the first bad event's position
 * @throws {OutboxDeadlockError} see {@link enqueue}
 */
export const enqueueMany: (
  client: PgQueryable,
  events: readonly OutboxEvent[],
  options?: EnqueueOptions,
) => Promise<EnqueueResult[]> = producer.enqueueMany;
