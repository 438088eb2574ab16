/**
 * Operations: what keeps a deployment healthy — pruning, backlog status, dead-letter handling, parked and failed
 * inbox events, the least-privilege database roles and the CloudWatch metrics.
 */

// Reads `showDeadLetter`'s exact payload text (numbers kept digit for digit) for re-serialising.
export { parseExactJson } from '../../platform/index.ts';
export * from './counters.ts';
export * from './dead-letters.ts';
export * from './failed-events.ts';
export * from './inbox-maintenance.ts';
export * from './metrics.ts';
export * from './parked-events.ts';
export * from './prune.ts';
export * from './roles.ts';
export * from './scale-out.ts';
export * from './status.ts';
