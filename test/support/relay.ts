/** Relay wiring for tests: the real EventBridge client pointed at a local bus. */
import type { RelaySettings } from '../../shared/platform/config.ts';
import { createEventBridgeClient } from '../../shared/relay/index.ts';
import type { ClaimOptions } from '../../shared/relay/sql/index.ts';

/** Settings with short timings, overridable per test. */
export function testSettings(overrides: Partial<RelaySettings> = {}): RelaySettings {
  return {
    eventBusName: 'test-bus',
    batchSize: 100,
    leaseSeconds: 30,
    maxAttempts: 5,
    backoffBaseMs: 10,
    backoffMaxMs: 50,
    publishConcurrency: 4,
    pipelineDepth: 2,
    maxRequestBytes: 1_048_576,
    perAggregateLimit: 10,
    ordering: 'aggregate',
    deadLetterPolicy: 'continue',
    pollIntervalMs: 20,
    idleReturnSeconds: 0,
    metricNamespace: 'OutboxTest',
    ...overrides,
  };
}

/** The real SDK client, over HTTP to `endpoint`, with dummy credentials (the local bus ignores SigV4). */
export function testClient(endpoint: string, options: { maxAttempts?: number } = {}) {
  return createEventBridgeClient({
    endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    maxAttempts: options.maxAttempts ?? 3,
  });
}

/** Options for a direct `claimBatch` call: ordered, `continue`, a 30 s lease, 10 heads × 10 events. */
export function claimOptions(leaseToken: string, overrides: Partial<ClaimOptions> = {}): ClaimOptions {
  return {
    leaseToken,
    leaseSeconds: 30,
    batchSize: 10,
    perAggregateLimit: 10,
    ordering: 'aggregate',
    deadLetterPolicy: 'continue',
    ...overrides,
  };
}
