/**
 * The CDK app (`cdk.json`): the demo stack. Context: `stackName` (default OutboxRelayDemo), and
 * `databaseAccess`: `proxy` (default, through RDS Proxy) or `direct` (IAM straight to the instance),
 * and `consumerTopology`: how the example billing consumer gets its events, `direct` (default, the
 * rule invokes its function) or `queue` (through an SQS queue), and `bus`: `classic` (default) or
 * `custom` (a Custom Event Bus, EventsV2, with a FIFO subscriber; `consumerTopology` must be direct).
 */
import { App } from 'aws-cdk-lib';
import { OutboxDemoStack } from './demo-stack.ts';

/** Builds the app; exported so tests synthesise exactly what `cdk synth` does. */
export function buildApp(app = new App()): { app: App; stack: OutboxDemoStack } {
  const databaseAccess = app.node.tryGetContext('databaseAccess') ?? 'proxy';
  if (databaseAccess !== 'proxy' && databaseAccess !== 'direct') {
    throw new Error(`context databaseAccess must be proxy or direct (got ${JSON.stringify(databaseAccess)})`);
  }
  const consumerTopology = app.node.tryGetContext('consumerTopology') ?? 'direct';
  if (consumerTopology !== 'direct' && consumerTopology !== 'queue') {
    throw new Error(
      `context consumerTopology must be direct or queue (got ${JSON.stringify(consumerTopology)})`,
    );
  }
  const bus = app.node.tryGetContext('bus') ?? 'classic';
  if (bus !== 'classic' && bus !== 'custom') {
    throw new Error(`context bus must be classic or custom (got ${JSON.stringify(bus)})`);
  }
  const stack = new OutboxDemoStack(app, app.node.tryGetContext('stackName') ?? 'OutboxRelayDemo', {
    description: 'Transactional outbox relay: Postgres outbox → EventBridge (demo)',
    databaseAccess,
    consumerTopology,
    bus,
  });
  return { app, stack };
}

if (import.meta.main) buildApp().app.synth();
