/**
 * The error hierarchy of the outbox. Every error thrown on purpose by this package is an
 * {@link OutboxError}; callers match on the subclass (or on `name`), never on message text.
 */
export class OutboxError extends Error {
  override name = 'OutboxError';
}

/**
 * An event was rejected by `enqueue` before anything was written. `field` names the offending
 * field in the caller's terms (`type`, `payload`, `aggregateId`…), e.g. `payload.items[2].name`.
 */
export class OutboxValidationError extends OutboxError {
  override name = 'OutboxValidationError';
  readonly field: string;
  /** Index of the event in an `enqueueMany` call, when there was more than one. */
  readonly index: number | undefined;
  constructor(field: string, message: string, options?: { index?: number; cause?: unknown }) {
    const where = options?.index === undefined ? field : `events[${options.index}].${field}`;
    super(`${where}: ${message}`, { cause: options?.cause });
    this.field = field;
    this.index = options?.index;
  }
}

/** A configuration variable is missing or malformed. `variable` names it, e.g. `EVENT_BUS_NAME`. */
export class OutboxConfigError extends OutboxError {
  override name = 'OutboxConfigError';
  readonly variable: string;
  constructor(variable: string, message: string) {
    super(`${variable}: ${message}`);
    this.variable = variable;
  }
}

/** An aggregate, as named in {@link OutboxDeadlockError}. */
export interface AggregateRef {
  aggregateType: string;
  aggregateId: string;
}

/**
 * Postgres chose this transaction as the victim of a deadlock (SQLSTATE 40P01) while it enqueued.
 *
 * What happened: enqueueing holds the lock on each aggregate's sequence counter (and on each
 * idempotency key) until the transaction ends, so that sequences follow commit order. Two
 * transactions that enqueue for the same aggregates in opposite orders (T1: order/1 then order/2,
 * T2: order/2 then order/1) each wait for the other; Postgres aborts one of them after its
 * `deadlock_timeout` (1 s by default). The other one goes on and commits.
 *
 * What to do: the transaction is already aborted and nothing of it was written, so retry the
 * *whole* transaction (`retryable` is true). To avoid it, enqueue each transaction's events with
 * one `enqueueMany` call, which locks aggregates in sorted order, or in the same order everywhere.
 */
export class OutboxDeadlockError extends OutboxError {
  override name = 'OutboxDeadlockError';
  /** Always true: retrying the whole transaction is the remedy. */
  readonly retryable = true as const;
  /** The SQLSTATE Postgres raised: deadlock_detected. */
  readonly sqlState = '40P01' as const;
  /** The aggregates this call was enqueueing for when it was aborted. */
  readonly aggregates: readonly AggregateRef[];
  constructor(aggregates: readonly AggregateRef[], options?: { cause?: unknown }) {
    const names = aggregates.map((a) => `${a.aggregateType}/${a.aggregateId}`);
    const list =
      names.length > 5 ? `${names.slice(0, 5).join(', ')} and ${names.length - 5} more` : names.join(', ');
    super(
      `enqueue for ${list} was aborted by Postgres to break a deadlock (SQLSTATE 40P01): another ` +
        'transaction holds the sequence lock of an aggregate (or the lock of an idempotency key) this one ' +
        'needs, while waiting for one this one holds — typically two transactions enqueueing for the same ' +
        'aggregates in opposite orders. Nothing of this transaction was written: retry the whole transaction. ' +
        'To avoid it, enqueue all of a transaction’s events in one enqueueMany call (it locks them in sorted order).',
      { cause: options?.cause },
    );
    this.aggregates = aggregates;
  }
}

/**
 * A concurrent producer committed an idempotency key this transaction enqueued, after this
 * transaction's snapshot was taken (SQLSTATE 40001, serialization_failure). It happens only under
 * REPEATABLE READ or SERIALIZABLE; under READ COMMITTED, the default, the second producer waits
 * and gets `duplicate: true`. The transaction is aborted and nothing of it was written: retry the
 * whole transaction (`retryable` is true), and the retry returns the existing event as a duplicate.
 */
export class OutboxConflictError extends OutboxError {
  override name = 'OutboxConflictError';
  /** Always true: retrying the whole transaction is the remedy. */
  readonly retryable = true as const;
  /** The SQLSTATE Postgres raised: serialization_failure. */
  readonly sqlState = '40001' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, { cause: options?.cause });
  }
}

/**
 * A call did not finish inside its deadline and was abandoned: a database statement that got no
 * answer (the server or a proxy stopped answering), or a pass whose lease or invocation ran out.
 * `code` is `OUTBOX_DEADLINE` (a transient failure: retry with a fresh connection); `operation`
 * names the call (`claim`, `mark published`, …) and `ms` the deadline it missed.
 */
export class OutboxDeadlineError extends OutboxError {
  override name = 'OutboxDeadlineError';
  readonly code = 'OUTBOX_DEADLINE';
  readonly operation: string;
  readonly ms: number;
  constructor(operation: string, ms: number, reason?: string) {
    super(`${operation}: no answer within ${Math.round(ms)} ms${reason ? ` (${reason})` : ''}; abandoned`);
    this.operation = operation;
    this.ms = ms;
  }
}

/**
 * The database has no outbox schema, or an older one than this code: a statement named a
 * function, table or column that does not exist there (SQLSTATE 42883 undefined_function, 42P01
 * undefined_table, 42703 undefined_column, or 3F000 invalid_schema_name: no schema `outbox`, whose
 * objects the statements name since migration 024). Raised by the producer's enqueue (nothing was
 * written) and by the consumer's inbox (`part: 'inbox'`: the handler did not run, nothing was
 * recorded, and the invocation fails so that Lambda retries it). What to do: apply the
 * migrations to that database — `DATABASE_URL=… npx outbox migrate` (or the construct's deploy-time
 * migration) — or, if they were applied into another schema, put that schema on the connection's
 * `search_path`. Not retryable until then.
 */
export class OutboxSchemaError extends OutboxError {
  override name = 'OutboxSchemaError';
  /** The SQLSTATE Postgres raised. */
  readonly sqlState: '42883' | '42P01' | '42703' | '3F000';
  /**
   * @param detail Postgres's message, naming the missing object
   * @param options.part which side found the schema missing: `outbox` (enqueue, the default) or `inbox` (a consumer)
   */
  constructor(
    sqlState: '42883' | '42P01' | '42703' | '3F000',
    detail: string,
    options?: { cause?: unknown; part?: 'outbox' | 'inbox' },
  ) {
    const part = options?.part ?? 'outbox';
    const what =
      sqlState === '42P01' || sqlState === '3F000'
        ? `the ${part} tables are missing from this database`
        : `the ${part} schema is missing from this database, or older than this version of outbox-relay-aws`;
    const outcome =
      part === 'inbox'
        ? 'The handler did not run and nothing was recorded; the invocation fails, so Lambda retries it.'
        : 'Nothing was written.';
    super(
      `${what} (${detail}, SQLSTATE ${sqlState}): run \`npx outbox migrate\` against it with the same ` +
        'connection settings (DATABASE_URL or PG*), or let the deploy-time migration do it; if the schema ' +
        `was migrated before migration 024 (schema \`outbox\`), migrate it again with this version. ${outcome}`,
      { cause: options?.cause },
    );
    this.sqlState = sqlState;
  }
}

/**
 * SQLSTATEs of a schema that is missing or older than this code: undefined_function (42883, e.g.
 * `outbox_enqueue` before `outbox migrate`; Postgres's message names the one called),
 * undefined_table (42P01), undefined_column (42703).
 */
const SCHEMA_SQLSTATES: ReadonlySet<string> = new Set(['42883', '42P01', '42703', '3F000']);

/**
 * An {@link OutboxSchemaError} for a database error with a schema SQLSTATE (42883, 42P01 or
 * 42703), keeping it as `cause`; `undefined` for any other error.
 * @param error the driver's error (porsager or node-postgres: `code` and `message`)
 * @param databaseError where its `code` and `message` are read (the error itself, or the cause a
 *   query builder wrapped)
 * @param part which side's statement found the schema missing (see {@link OutboxSchemaError})
 */
export function schemaErrorFrom(
  error: unknown,
  databaseError: { code?: unknown; message?: unknown } | undefined = error as { code?: unknown },
  part: 'outbox' | 'inbox' = 'outbox',
): OutboxSchemaError | undefined {
  const code = databaseError?.code;
  if (typeof code !== 'string' || !SCHEMA_SQLSTATES.has(code)) return undefined;
  const message = databaseError?.message;
  return new OutboxSchemaError(
    code as '42883' | '42P01' | '42703' | '3F000',
    typeof message === 'string' ? message : 'undefined object',
    { cause: error, part },
  );
}

/**
 * `--function-name` is not the inbox consumer's function (`outbox inbox … replay`, shared/consumer/cli/consumer-function.ts), or its configuration could not be read (then
 * `cause` is the Lambda API's error). `found` is the consumer the function's environment names,
 * undefined when it names none or was not read.
 */
export class ConsumerFunctionError extends OutboxError {
  override name = 'ConsumerFunctionError';
  /** The option at fault. */
  readonly option = '--function-name';
  readonly functionName: string;
  readonly consumer: string;
  readonly found: string | undefined;
  constructor(
    functionName: string,
    consumer: string,
    message: string,
    options: { found?: string; cause?: unknown } = {},
  ) {
    super(`--function-name ${functionName}: ${message}`, { cause: options.cause });
    this.functionName = functionName;
    this.consumer = consumer;
    this.found = options.found;
  }
}
