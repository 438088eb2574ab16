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
 * Locks and errors are those of the main `enqueue` (it calls the same database function,
 * `outbox_enqueue_many`): the aggregate's sequence lock is held until the transaction ends.
 */
import { type SQL, sql } from 'drizzle-orm';
import { DEFAULT_MAX_REQUEST_BYTES } from '../platform/index.ts';
import { translateEnqueueError } from './sql-errors.ts';
import { type EnqueuedRow, enqueueParameters, toResults } from './statement.ts';
import type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';
import { validateEvent } from './validation.ts';

export { OutboxDeadlockError, OutboxError, OutboxValidationError } from '../platform/errors.ts';
export type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';

/**
 * What the adapter needs of Drizzle: `execute(sql)`, which a `PgDatabase` and the `tx` of
 * `db.transaction(async (tx) => …)` both have. Pass the `tx` to make the event part of it.
 */
export interface DrizzleExecutor {
  execute(query: SQL): PromiseLike<unknown>;
}

/**
 * Enqueues one event in a Drizzle transaction.
 * @throws {OutboxValidationError} naming the bad field; nothing was sent to the database
 * @throws {OutboxDeadlockError} when Postgres aborted the transaction to break a deadlock: retry the whole transaction
 * @throws Drizzle's error otherwise
 */
export async function enqueue(
  tx: DrizzleExecutor,
  event: OutboxEvent,
  options: EnqueueOptions = {},
): Promise<EnqueueResult> {
  const [result] = await enqueueMany(tx, [event], options);
  return result as EnqueueResult;
}

/**
 * Enqueues several events in a Drizzle transaction with one statement; results in input order.
 * @throws {OutboxValidationError} with `index` set to the first bad event's position
 * @throws {OutboxDeadlockError} see {@link enqueue}
 */
export async function enqueueMany(
  tx: DrizzleExecutor,
  events: readonly OutboxEvent[],
  options: EnqueueOptions = {},
): Promise<EnqueueResult[]> {
  const valid = events.map((event, index) =>
    validateEvent(event, options, events.length > 1 ? index : undefined),
  );
  if (valid.length === 0) return [];
  const p = enqueueParameters(valid, options.maxEntryBytes ?? DEFAULT_MAX_REQUEST_BYTES);
  // sql.param keeps each array one bound parameter (a bare array would expand into a list).
  const query = sql`select ord, event_id, aggregate_type, aggregate_id, sequence, duplicate
    from outbox_enqueue_many(
      ${sql.param(p.eventTypes)}::text[], ${sql.param(p.sources)}::text[],
      ${sql.param(p.aggregateTypes)}::text[], ${sql.param(p.aggregateIds)}::text[],
      ${sql.param(p.payloads)}::text[]::jsonb[], ${sql.param(p.idempotencyKeys)}::text[],
      ${sql.param(p.traceHeaders)}::text[], ${p.maxEntryBytes}::integer)`;
  let result: unknown;
  try {
    result = await tx.execute(query);
  } catch (error) {
    throw translateEnqueueError(error, valid);
  }
  // node-postgres returns { rows }, postgres.js an array of rows.
  const rows = Array.isArray(result) ? result : (result as { rows: unknown[] }).rows;
  return toResults(rows as EnqueuedRow[]);
}
