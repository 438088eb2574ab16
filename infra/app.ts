/** The CDK app (`cdk.json`): the demo stack. */
import { App, Stack } from 'aws-cdk-lib';
import { OutboxRelay } from './outbox-relay.ts';

/** Builds the app; exported so tests synthesise exactly what `cdk synth` does. */
export function buildApp(app = new App()): { app: App; stack: Stack } {
  const stack = new Stack(app, 'OutboxRelayDemo', {
    description: 'Transactional outbox relay: Postgres outbox → EventBridge',
  });
  new OutboxRelay(stack, 'Outbox', {
    databaseEnvironment: {
      PGHOST: app.node.tryGetContext('pgHost') ?? 'localhost',
      PGPORT: String(app.node.tryGetContext('pgPort') ?? 5432),
      PGDATABASE: app.node.tryGetContext('pgDatabase') ?? 'postgres',
      PGUSER: app.node.tryGetContext('pgUser') ?? 'outbox_relay',
    },
  });
  return { app, stack };
}

if (import.meta.main) buildApp().app.synth();
