/**
 * The relay core — claim, publish, mark — and the loop that repeats it, for the relay Lambda, the
 * CLI and teams that host the relay themselves (ECS, a long-running process).
 */
export { backoffDelayMs } from './backoff.ts';
export { type ClaimOptions, claimBatch } from './claim.ts';
export {
  checkEventBridgeClient,
  createEventBridgeClient,
  type EntryOutcome,
  PERMANENT_ENTRY_ERRORS,
} from './publish.ts';
export {
  emptyCounts,
  hasPending,
  type RelayCounts,
  type RelayDeps,
  type RelayFailure,
  type RunRelayOptions,
  relayOnce,
  runRelay,
  Semaphore,
  type StopReason,
} from './relay.ts';
export type { ClaimedEvent } from './types.ts';
