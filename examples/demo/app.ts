/**
 * The CDK app (`cdk.json`): the demo stack. Context: `stackName` (default OutboxRelayDemo), and
 * `databaseAccess`: `proxy` (default, through RDS Proxy) or `direct` (IAM straight to the instance).
 */
import { App } from 'aws-cdk-lib';
import { OutboxDemoStack } from './demo-stack.ts';

/** Builds the app; exported so tests synthesise exactly what `cdk synth` does. */
export function buildApp(app = new App()): { app: App; stack: OutboxDemoStack } {
  const databaseAccess = app.node.tryGetContext('databaseAccess') ?? 'proxy';
  if (databaseAccess !== 'proxy' && databaseAccess !== 'direct') {
    throw new Error(`context databaseAccess must be proxy or direct (got ${JSON.stringify(databaseAccess)})`);
  }
  const stack = new OutboxDemoStack(app, app.node.tryGetContext('stackName') ?? 'OutboxRelayDemo', {
    description: 'Transactional outbox relay: Postgres outbox → EventBridge (demo)',
    databaseAccess,
  });
  return { app, stack };
}

if (import.meta.main) buildApp().app.synth();
