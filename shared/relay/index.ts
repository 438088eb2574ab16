/**
 * The relay — claim, publish, mark, in a loop — for the relay Lambda, the CLI and teams that host
 * the relay themselves (ECS, a long-running process). What to compose with: {@link createRelay}
 * (settings, pool, client and loop wired from the environment), or its parts: `openPool`, the
 * settings, `createEventBridgeClient`, `runRelay`. The pieces inside a pass (leases, claims,
 * semaphores) are internals, imported by path in this repository's tests.
 */

// What a self-hosted relay needs besides the core: a pool configured like the Lambda's, and the
// settings read and validated from the environment (docs/configuration.md).
export {
  ConnectionPool,
  type ConnectOptions,
  connect,
  ignoreTransientDriverRejections,
  loadRelaySettings,
  OUTBOX_SEARCH_PATH,
  openPool,
  poolSize,
  type RelaySettings,
  type RelayTuning,
  relayConfigSchema,
  relayPoolSize,
  type Sql,
} from '../platform/index.ts';
export {
  checkEventBridgeClient,
  createEventBridgeClient,
  createEventsV2Client,
  EVENTSV2_ENDPOINT_ENV,
  EVENTSV2_MAX_ENTRIES_PER_REQUEST,
  EventsV2Client,
  type EventsV2ClientConfig,
  EventsV2PutEventsCommand,
  type EventsV2PutEventsInput,
  type EventsV2PutEventsOutput,
  eventBridgePublisher,
  eventGroupIdOf,
  eventsV2Publisher,
  MAX_EVENT_GROUP_ID_LENGTH,
  PERMANENT_ENTRY_ERRORS,
  type Publisher,
  type PublishRequest,
} from './buses/index.ts';
export type { RelayCounts } from './counts.ts';
export { type FailureReason, FailureReasons } from './failure-reasons.ts';
export {
  IDLE_POLL_FLOOR_MS,
  idlePollMs,
  type PassReport,
  type RelayRunResult,
  type RunRelayOptions,
  runRelay,
  type StopReason,
} from './loop.ts';
export type { RelayFailure } from './pass-options.ts';
export {
  type CreateRelayOptions,
  createRelay,
  RELAY_PLAN_CACHE_MODE,
  type Relay,
  type RelayRunOptions,
} from './run-relay.ts';
