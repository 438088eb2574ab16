/**
 * `@outbox-relay-aws/consumer/otel`: the inbox's OpenTelemetry span: one per invocation, `outbox.inbox <consumer>` (kind CONSUMER),
 * around everything the inbox does for the event, the handler included, with the consumer, the
 * event id, the sequence and the outcome as attributes.
 *
 * Its parent: the span active when the invocation starts (the OpenTelemetry Lambda layer's
 * invocation span, or Powertools Tracer's segment bridged to OpenTelemetry), else the producer's,
 * read from the envelope's `metadata.traceparent` (docs/observe.md#the-trace). The producer's is
 * linked in both cases, so the consumer's work is found from the producer's trace either way.
 *
 * Opt in: `inbox({ …, tracing: inboxTracing }, handler)`. This entry point imports
 * `@opentelemetry/api` (an optional peer of the package), so a bundler puts it in the consumer's
 * bundle; the inbox's own entry point does not, and a consumer without it pays nothing. Without an
 * SDK registered the API's tracer is a no-op and the invocation runs as it did.
 */
import * as otel from '@opentelemetry/api';
import { idsOfTraceparent } from '../platform/trace-context.ts';

/** Attribute names of the inbox's span. */
export const InboxSpanAttribute = {
  Consumer: 'outbox.consumer',
  EventId: 'outbox.event_id',
  Sequence: 'outbox.sequence',
  Outcome: 'outbox.outcome',
} as const;

/** What became of the event: the inbox's skip (`duplicate`, `stale`, `parked`…), else `applied`. */
function outcomeOf(result: unknown): string {
  const skip = (result as { inbox?: unknown } | null | undefined)?.inbox;
  return typeof skip === 'string' ? skip : 'applied';
}

/** Runs one invocation of the inbox of `consumer` inside its span. */
export type InboxSpanRunner = <R>(event: unknown, run: () => Promise<R>) => Promise<R>;

/** The inbox's `tracing` option: builds the span runner of one consumer. */
export function inboxTracing(consumer: string): InboxSpanRunner {
  return async (event, run) => {
    const metadata = (event as { detail?: { metadata?: Record<string, unknown> } } | null | undefined)?.detail
      ?.metadata;
    const producer = idsOfTraceparent(metadata?.traceparent);
    const remote = producer && {
      traceId: producer.traceId,
      spanId: producer.spanId,
      traceFlags: producer.sampled ? otel.TraceFlags.SAMPLED : otel.TraceFlags.NONE,
      isRemote: true,
    };
    const active = otel.context.active();
    const parent = remote && !otel.trace.getSpan(active) ? otel.trace.setSpanContext(active, remote) : active;
    const attributes: Record<string, string> = { [InboxSpanAttribute.Consumer]: consumer };
    if (typeof metadata?.eventId === 'string') attributes[InboxSpanAttribute.EventId] = metadata.eventId;
    if (typeof metadata?.sequence === 'number' || typeof metadata?.sequence === 'string')
      attributes[InboxSpanAttribute.Sequence] = String(metadata.sequence);
    const span = otel.trace
      .getTracer('@outbox-relay-aws/consumer')
      .startSpan(
        `outbox.inbox ${consumer}`,
        { kind: otel.SpanKind.CONSUMER, attributes, links: remote ? [{ context: remote }] : [] },
        parent,
      );
    try {
      const result = await otel.context.with(otel.trace.setSpan(parent, span), run);
      span.setAttribute(InboxSpanAttribute.Outcome, outcomeOf(result));
      return result;
    } catch (error) {
      span.setAttribute(InboxSpanAttribute.Outcome, 'failed');
      if (error instanceof Error) span.recordException(error);
      span.setStatus({
        code: otel.SpanStatusCode.ERROR,
        message: error instanceof Error ? error.message : String(error),
      });
      throw error;
    } finally {
      span.end();
    }
  };
}
