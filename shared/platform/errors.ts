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
