/**
 * The consumer's operations: what an operator (or a scheduled function of the consumer's own)
 * does with an inbox besides applying events: parked events (list, replay, discard), failed
 * events, pruning, the parked count as metrics. `outbox-inbox` and `outbox inbox` run them; the
 * relay's operations (`@outbox-relay-aws/relay/operations`) re-export them, and the monitor prunes
 * the inbox of the outbox's database with them.
 */
export * from './failed-events.ts';
export * from './inbox-maintenance.ts';
export * from './parked-events.ts';
