/**
 * The CDK side (package `@outbox-relay-aws/cdk`): the `OutboxRelay` construct and its props, and
 * the `OutboxConsumer` construct. In the installed package OutboxRelay deploys handler bundles
 * built at pack time; OutboxConsumer bundles the consumer's own entry with esbuild (an optional
 * peer of the package: the app installs it), locally. Neither needs Docker.
 */
// Names a consumer's own CDK wiring shares with its function: environment variables, database
// roles, the inbox's metric names.

export type { MonitorTuning, RelayTuning } from '../shared/platform/config.ts';
export {
  DEFAULT_METRIC_NAMESPACE,
  DEFAULT_ROLES,
  EnvVar,
  INBOX_METRIC_DIMENSION,
  InboxMetricName,
  type OutboxRoles,
} from '../shared/platform/names.ts';
export { OUTBOX_BUNDLING } from './bundling.ts';
export type { OutboxConsumerAlarms } from './consumer-observability.ts';
export {
  CUSTOM_BUS_DEFAULT_MAX_EVENT_AGE_SECONDS,
  CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS,
  MAX_QUEUE_VISIBILITY_SECONDS,
  type OutboxConsumerEvent,
  type OutboxConsumerInboxSettings,
  type OutboxConsumerProps,
  RETRY_WINDOW_SECONDS_BY_ATTEMPTS,
} from './consumer-props.ts';
export { EVENTSV2_NAMESPACE, type OutboxCustomBusAlarms } from './custom-event-bus.ts';
export {
  type OutboxDatabaseConnection,
  type OutboxDatabaseProps,
  type OutboxDatabaseTarget,
  type OutboxMigrationProps,
  outboxDatabaseConnection,
} from './database.ts';
export { type OutboxAlarms, RUNBOOK_ANCHORS } from './observability.ts';
export { OutboxConsumer } from './outbox-consumer.ts';
export { OutboxRelay } from './outbox-relay.ts';
export {
  DEFAULT_CUSTOM_BUS_RETENTION_DAYS,
  DEFAULT_RELAY_MEMORY_MB,
  ECONOMY_IDLE_RETURN_SECONDS,
  OPERATIONS_DOCS_URL,
  type OutboxCustomEventBusProps,
  type OutboxRelayProps,
} from './props.ts';
export { RetentionWarning } from './retention.ts';
