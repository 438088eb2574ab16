/**
 * The relay's publish span: each PutEvents request a pass sends runs in a span `outbox.publish`
 * (kind PRODUCER) that links the trace of every event it carries (their `trace_header`, mapped as
 * in platform/trace-context.ts), with the count of entries and of failed ones as attributes. A
 * decorator of the {@link Publisher}, so neither bus's module knows of it.
 *
 * `@opentelemetry/api` is an optional peer, loaded once by a dynamic import: without it, or without
 * an SDK registered (the API's tracer is then a no-op), requests go out exactly as before.
 */
import { idsOfTraceHeader } from '../../platform/index.ts';
import type { Publisher } from './publisher.ts';

type OtelApi = typeof import('@opentelemetry/api');

/** Attribute names of the publish span. */
export const PublishSpanAttribute = {
  Bus: 'outbox.bus',
  Entries: 'messaging.batch.message_count',
  Failed: 'outbox.failed_entries',
  EventId: 'outbox.event_id',
} as const;

let loaded: Promise<OtelApi | undefined> | undefined;

function loadApi(): Promise<OtelApi | undefined> {
  const specifier = '@opentelemetry/api';
  loaded ??= import(specifier).then(
    (m: OtelApi & { default?: OtelApi }) => (m.trace ? m : m.default),
    () => undefined,
  );
  return loaded;
}

/** The publisher with each `put` in a publish span; starts loading `@opentelemetry/api` now. */
export function tracedPublisher(publisher: Publisher): Publisher {
  const api = loadApi();
  return {
    kind: publisher.kind,
    pack: (events) => publisher.pack(events),
    check: () => publisher.check(),
    async put(request, signal, answerTimeoutMs) {
      const otel = await api;
      if (!otel) return publisher.put(request, signal, answerTimeoutMs);
      const links = [];
      for (const event of request.events) {
        const ids = idsOfTraceHeader(event.traceHeader);
        if (!ids) continue;
        const traceFlags = ids.sampled ? otel.TraceFlags.SAMPLED : otel.TraceFlags.NONE;
        links.push({
          context: { traceId: ids.traceId, spanId: ids.spanId, traceFlags, isRemote: true },
          attributes: { [PublishSpanAttribute.EventId]: event.eventId },
        });
      }
      const span = otel.trace.getTracer('@outbox-relay-aws/relay').startSpan('outbox.publish', {
        kind: otel.SpanKind.PRODUCER,
        links,
        attributes: {
          [PublishSpanAttribute.Bus]: publisher.kind,
          [PublishSpanAttribute.Entries]: request.events.length,
        },
      });
      try {
        const outcomes = await publisher.put(request, signal, answerTimeoutMs);
        const failed = outcomes.filter((o) => !o.ok).length;
        span.setAttribute(PublishSpanAttribute.Failed, failed);
        if (failed > 0)
          span.setStatus({ code: otel.SpanStatusCode.ERROR, message: `${failed} entries failed` });
        return outcomes;
      } finally {
        span.end();
      }
    },
  };
}
