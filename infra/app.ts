/** The CDK app (`cdk.json`): the demo stack. Context: `stackName` (default OutboxRelayDemo). */
import { App } from 'aws-cdk-lib';
import { OutboxDemoStack } from './demo-stack.ts';

/** Builds the app; exported so tests synthesise exactly what `cdk synth` does. */
export function buildApp(app = new App()): { app: App; stack: OutboxDemoStack } {
  const stack = new OutboxDemoStack(app, app.node.tryGetContext('stackName') ?? 'OutboxRelayDemo', {
    description: 'Transactional outbox relay: Postgres outbox → EventBridge (demo)',
  });
  return { app, stack };
}

if (import.meta.main) buildApp().app.synth();
