/**
 * Operations: what keeps a deployment healthy — pruning, backlog status, dead-letter handling, parked and failed
 * inbox events, the least-privilege database roles and the CloudWatch metrics.
 */

// The consumer's operations (parked and failed inbox events, the inbox's pruning), at home in the
// consumer package, still exported here for existing users.
export * from '../../consumer/operations/index.ts';
// Reads `showDeadLetter`'s exact payload text (numbers kept digit for digit) for re-serialising.
export { parseExactJson } from '../../platform/index.ts';
export * from './counters.ts';
export * from './dead-letters.ts';
export * from './heartbeat.ts';
export * from './metrics.ts';
export * from './prune.ts';
export * from './roles.ts';
export * from './scale-out.ts';
export * from './status.ts';
