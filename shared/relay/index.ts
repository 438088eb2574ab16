/**
 * The relay core — claim, publish, mark — and the loop that repeats it, for the relay Lambda, the
 * CLI and teams that host the relay themselves (ECS, a long-running process).
 */

// What a self-hosted relay needs besides the core: a pool configured like the Lambda's, and the
// settings read and validated from the environment (README, Configuration).
export {
  type ConnectOptions,
  connect,
  ignoreTransientDriverRejections,
  loadRelaySettings,
  type RelaySettings,
  type Sql,
} from '../platform/index.ts';
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
  type RunRelayOptions,
  relayOnce,
  runRelay,
  Semaphore,
  type StopReason,
} from './relay.ts';
export type { ClaimedEvent } from './types.ts';
