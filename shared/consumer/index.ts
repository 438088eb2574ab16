/**
 * The consumer side: the inbox middleware that applies each event once per consumer, and typed
 * events shared with the producer.
 */
export type { Envelope, EnvelopeMetadata } from '../platform/envelope.ts';
export { OutboxError } from '../platform/errors.ts';
// The pool an inbox consumer should pass: replaceable after a lost connection (see InboxOptions.sql).
export { ConnectionPool, type ConnectOptions, connect } from '../platform/index.ts';
export { defineEvent, type EventDefinition } from '../producer/typed-events.ts';
export {
  type InboxContext,
  InboxEnvelopeError,
  InboxGapError,
  type InboxOptions,
  InboxOptionsError,
  type InboxOrder,
  type InboxSkip,
  inbox,
  LAMBDA_ASYNC_RETRY_WINDOW_SECONDS,
} from './inbox.ts';
export {
  InboxAbortedError,
  type InboxAbortReason,
  InboxCommitError,
} from './invocation.ts';
