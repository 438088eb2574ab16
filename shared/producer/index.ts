/**
 * The producer API: enqueue events inside the caller's own transaction, so an event exists if and
 * only if the business change committed. This is the package's main entry point.
 */
export {
  type AggregateRef,
  OutboxConflictError,
  OutboxDeadlockError,
  OutboxError,
  OutboxSchemaError,
  OutboxValidationError,
} from '../platform/errors.ts';
export { enqueue, enqueueMany } from './enqueue.ts';
export {
  defineEvent,
  type EventDefinition,
  type PayloadInput,
  type PayloadOutput,
  type PayloadSchema,
} from './typed-events.ts';
export type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';
export { type ValidEvent, validateEvent } from './validation.ts';
