/**
 * Operations: what keeps a deployment healthy — pruning, backlog status, dead-letter handling,
 * the least-privilege database roles and the CloudWatch metrics.
 */
export * from './dead-letters.ts';
export * from './metrics.ts';
export * from './prune.ts';
export * from './roles.ts';
export * from './scale-out.ts';
export * from './status.ts';
