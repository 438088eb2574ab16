/**
 * The consumer side: the inbox that applies each event once per consumer, in the order it asks
 * for, and typed events shared with the producer.
 */

// The pool an inbox consumer should pass: replaceable after a lost connection (see InboxOptions.sql).
export { ConnectionPool, type ConnectOptions, connect, type Sql, type Tx } from '../platform/db.ts';
export type { Envelope, EnvelopeMetadata } from '../platform/envelope.ts';
export { OutboxError, OutboxSchemaError } from '../platform/errors.ts';
// The consumer's database role by default (`outbox_consumer`), which its own tables are granted to.
export { DEFAULT_ROLES, type OutboxRoles } from '../platform/names.ts';
export {
  defineEvent,
  type EventDefinition,
  type PayloadInput,
  type PayloadOutput,
  type PayloadSchema,
} from '../producer/typed-events.ts';
export type { InboxEvent, WithMetadataDelivery } from './delivery.ts';
export { InboxEnvelopeError, InboxGapError, InboxOptionsError, InboxPayloadError } from './errors.ts';
export {
  type InboxContext,
  type InboxHandler,
  type InboxOptions,
  inbox,
  LAMBDA_ASYNC_RETRY_WINDOW_SECONDS,
} from './inbox.ts';
export {
  InboxAbortedError,
  type InboxAbortReason,
  InboxCommitError,
} from './invocation.ts';
export type { InboxMetricsOptions } from './metrics.ts';
export type { InboxArrival, InboxOrder, InboxSkip } from './order.ts';
export { type EventBridgeHandler, type SqsBatchFailureListener, sqsBatch } from './sqs-batch.ts';
