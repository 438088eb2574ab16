/**
 * Turns the database errors of an enqueue into the package's typed errors, for every producer
 * path (the porsager API, the `pg`, Drizzle and Kysely adapters) and both statements they send
 * (`outbox_enqueue` for one event without a key, `outbox_enqueue_many` otherwise: both raise the
 * same errors). Matched on SQLSTATE and the error's column, never on text.
 */
import {
  OutboxConflictError,
  OutboxDeadlockError,
  OutboxValidationError,
  schemaErrorFrom,
} from '../platform/errors.ts';

/**
 * SQLSTATE of the enqueue functions' validation errors (invalid_parameter_value, raised by
 * `outbox_enqueue_reject` for `outbox_enqueue` and `outbox_enqueue_many`); COLUMN names the field.
 */
export const ENQUEUE_INVALID_SQLSTATE = '22023';
/** SQLSTATE of a deadlock (deadlock_detected). */
export const DEADLOCK_SQLSTATE = '40P01';
/** SQLSTATE of a snapshot that missed a concurrent commit (serialization_failure). */
export const SERIALIZATION_SQLSTATE = '40001';
/**
 * Maps a failed enqueue statement's error: 40P01 → {@link OutboxDeadlockError}; 40001 →
 * {@link OutboxConflictError} (a key committed after the snapshot; retry); 22023 with a
 * column (raised by either enqueue function; for one event its message has no `events[i].`
 * prefix) → {@link OutboxValidationError} naming that parameter; 42883, 42P01 or 42703 →
 * {@link OutboxSchemaError} (run `outbox migrate`); anything else is returned unchanged.
 * @param events what the call was enqueueing (their aggregates are named in a deadlock error)
 */
export function translateEnqueueError(
  error: unknown,
  events: readonly { aggregateType: string; aggregateId: string }[],
): unknown {
  // Drizzle wraps the driver's error (DrizzleQueryError) and keeps it as `cause`.
  const e = databaseError(error);
  if (e?.code === DEADLOCK_SQLSTATE) {
    const seen = new Map(events.map((v) => [`${v.aggregateType}\u0000${v.aggregateId}`, v]));
    const aggregates = [...seen.values()].map((v) => ({
      aggregateType: v.aggregateType,
      aggregateId: v.aggregateId,
    }));
    return new OutboxDeadlockError(aggregates, { cause: error });
  }
  if (e?.code === SERIALIZATION_SQLSTATE) {
    const text =
      typeof e.message === 'string' ? e.message.replace(/^outbox_enqueue: /, '') : 'serialization failure';
    return new OutboxConflictError(
      `enqueue could not serialise (SQLSTATE 40001): ${text}. Nothing of this transaction was written: retry the whole transaction.`,
      { cause: error },
    );
  }
  const schema = schemaErrorFrom(error, e ?? undefined);
  if (schema !== undefined) return schema;
  // porsager names the field `column_name`, node-postgres `column`.
  const column = typeof e?.column_name === 'string' ? e.column_name : e?.column;
  if (e?.code === ENQUEUE_INVALID_SQLSTATE && typeof column === 'string' && column !== '') {
    const text = typeof e.message === 'string' ? e.message.replace(/^outbox_enqueue: /, '') : 'is invalid';
    return new OutboxValidationError(column, text.slice(text.indexOf(': ') + 2), { cause: error });
  }
  return error;
}

type DatabaseError = { code?: unknown; column?: unknown; column_name?: unknown; message?: unknown };

/** The error itself when it carries a SQLSTATE, else the first `cause` that does. */
function databaseError(error: unknown): DatabaseError | null {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current !== null && typeof current === 'object'; depth++) {
    if (typeof (current as DatabaseError).code === 'string') return current as DatabaseError;
    current = (current as { cause?: unknown }).cause;
  }
  return null;
}
