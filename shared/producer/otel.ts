/**
 * `outbox-relay-aws/otel`: enqueue with the active OpenTelemetry trace. After
 * {@link traceEnqueues}, every event enqueued without a `traceHeader` of its own (by `enqueue`,
 * `enqueueMany` and the `pg`, Drizzle and Kysely adapters) stores the active span's context as an
 * X-Ray trace header (`Root=1-…;Parent=…;Sampled=…`), which the relay publishes as EventBridge's
 * `TraceHeader` and as the envelope's `metadata.traceparent` (docs/observe.md#the-trace).
 *
 * Opt in, once at start-up: this entry point imports `@opentelemetry/api` (an optional peer of the
 * package); the producer's main entry point does not, so a producer that does not call it has the
 * same bundle and behaviour as before.
 */
import { trace } from '@opentelemetry/api';
import { xrayTraceHeader } from '../platform/trace-context.ts';
import { enqueueHooks } from './statement.ts';

/**
 * The X-Ray trace header of the active span's context, or undefined when no span is active (or
 * no SDK is registered: the API's context is then empty) or its context is invalid.
 */
export function activeTraceHeader(): string | undefined {
  const context = trace.getActiveSpan()?.spanContext();
  if (!context) return undefined;
  return xrayTraceHeader({
    traceId: context.traceId,
    spanId: context.spanId,
    sampled: (context.traceFlags & 1) === 1,
  });
}

/** Turns the capture on (default) or off for every enqueue in this process. */
export function traceEnqueues(enabled = true): void {
  enqueueHooks.traceHeader = enabled ? activeTraceHeader : undefined;
}
