/**
 * The relay core — claim, publish, mark — and the loop that repeats it, for the relay Lambda, the
 * CLI and teams that host the relay themselves (ECS, a long-running process).
 */

// What a self-hosted relay needs besides the core: a pool configured like the Lambda's, and the
// settings read and validated from the environment (docs/configuration.md).
export {
  ConnectionPool,
  type ConnectOptions,
  connect,
  ignoreTransientDriverRejections,
  loadRelaySettings,
  type RelaySettings,
  type Sql,
} from '../platform/index.ts';
export { AnswerTimeout, type AnswerTimeoutOptions } from './answer-timeout.ts';
export { backoffDelayMs } from './backoff.ts';
export { emptyCounts, type RelayCounts } from './counts.ts';
export { Lease, type LeaseLeftover } from './lease.ts';
export {
  type PassReport,
  type RunRelayOptions,
  runRelay,
  type StopReason,
  UnreturnedLeases,
} from './loop.ts';
export {
  type PassCheckpoint,
  type PassOptions,
  type RelayDeps,
  type RelayFailure,
  relayOnce,
  relayPass,
  STATEMENT_DEADLINE_MS,
} from './pass.ts';
export {
  checkEventBridgeClient,
  createEventBridgeClient,
  type EntryOutcome,
  PERMANENT_ENTRY_ERRORS,
  PUT_EVENTS_TIMEOUTS,
  PutEventsTimeoutError,
} from './publish.ts';
export { Semaphore } from './semaphore.ts';
export {
  type ClaimOptions,
  claimBatch,
  countHeldBack,
  type HeldBack,
  type HoldBackPolicy,
  hasPending,
} from './sql/index.ts';
export type { ClaimedEvent } from './types.ts';
