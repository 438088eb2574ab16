/**
 * Operations: what keeps a deployment healthy — pruning, backlog status, dead-letter handling, parked and failed
 * inbox events, the least-privilege database roles and the CloudWatch metrics.
 */

export * from '../../consumer/operations/failed-events.ts';
export * from '../../consumer/operations/inbox-maintenance.ts';
export * from '../../consumer/operations/parked-events.ts';
// Reads `showDeadLetter`'s exact payload text (numbers kept digit for digit) for re-serialising.
export { parseExactJson } from '../../platform/index.ts';
export * from './counters.ts';
export * from './dead-letters.ts';
export * from './metrics.ts';
export * from './prune.ts';
export * from './roles.ts';
export * from './scale-out.ts';
export * from './status.ts';
