/**
 * The consumer side: the inbox middleware that applies each event once per consumer, and typed
 * events shared with the producer.
 */
export type { Envelope, EnvelopeMetadata } from '../platform/envelope.ts';
export { OutboxError } from '../platform/errors.ts';
export { defineEvent, type EventDefinition } from '../producer/typed-events.ts';
export {
  type InboxContext,
  InboxEnvelopeError,
  InboxGapError,
  type InboxOptions,
  type InboxOrder,
  type InboxSkip,
  inbox,
} from './inbox.ts';
