/**
 * The CDK side of the package (entry point `outbox-relay-aws/cdk`): the `OutboxRelay` construct
 * and its props. In the installed package the construct deploys handler bundles built at pack time,
 * so `cdk synth` needs neither esbuild nor Docker.
 */
export type { MonitorTuning, RelayTuning } from '../shared/platform/config.ts';
export {
  DEFAULT_RELAY_MEMORY_MB,
  ECONOMY_IDLE_RETURN_SECONDS,
  type OutboxDatabaseConnection,
  type OutboxDatabaseProps,
  type OutboxDatabaseTarget,
  type OutboxMigrationProps,
  OutboxRelay,
  type OutboxRelayProps,
  outboxDatabaseConnection,
} from './outbox-relay.ts';
