/**
 * What the inbox throws on purpose, besides the invocation's own {@link InboxAbortedError} and
 * {@link InboxCommitError} (invocation.ts). Each fails the invocation, so that Lambda retries it
 * and, after its last retry, hands it to the function's on-failure destination with the error's
 * name and message in the record: nothing is acknowledged without being applied or counted.
 */
import { OutboxError, schemaErrorFrom } from '../platform/errors.ts';

/**
 * A database error of the inbox's own statements that says its schema is missing (SQLSTATE
 * 42883, 42P01 or 42703) becomes an {@link OutboxSchemaError} saying to run `npx outbox migrate`;
 * any other error is returned unchanged. Not for the handler's statements: there a missing table
 * is the application's own.
 */
export function translateSchemaError(error: unknown): unknown {
  return schemaErrorFrom(error, undefined, 'inbox') ?? error;
}

/**
 * `wait-for-gap`: the event arrived ahead of a missing one of its chain; thrown so that Lambda
 * retries it later, once the missing one has likely been applied.
 */
export class InboxGapError extends OutboxError {
  override name = 'InboxGapError';
  /** How long this event has waited so far, seconds (database clock). */
  readonly waitedSeconds: number;
  constructor(message: string, waitedSeconds: number) {
    super(message);
    this.waitedSeconds = waitedSeconds;
  }
}

/**
 * The EventBridge event does not carry a valid outbox envelope, or its DetailType is not one the
 * consumer declared (`types`). `field` names what is wrong, in the event's own terms:
 * `detail.metadata.sequence`, `source`, `detail-type`…
 */
export class InboxEnvelopeError extends OutboxError {
  override name = 'InboxEnvelopeError';
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}

/**
 * The payload (`detail.data`) does not match the consumer's `schema`. `field` names the first
 * offending field (`detail.data.total`, `detail.data.items[2].sku`); `cause` is the schema's own
 * error (a `ZodError`, with every issue).
 */
export class InboxPayloadError extends OutboxError {
  override name = 'InboxPayloadError';
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(`${field}: ${message}`, options);
    this.field = field;
  }
}

/**
 * An option of `inbox` is invalid (thrown at once, when the handler is built), or the `key`
 * function returned something that is not a key (thrown by the invocation). `field` names it,
 * e.g. `gapWaitSeconds`.
 */
export class InboxOptionsError extends OutboxError {
  override name = 'InboxOptionsError';
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}
