/**
 * The trace from the producer's request to the consumer's inbox, through the real relay, the local
 * bus and the inbox, recorded by OpenTelemetry's in-memory exporter (docs/observe.md#the-trace).
 */
import { randomUUID } from 'node:crypto';
import { context, type Span, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inbox } from '../../shared/consumer/index.ts';
import { inboxTracing } from '../../shared/consumer/otel.ts';
import { type AcceptedEvent, type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { enqueue } from '../../shared/producer/enqueue.ts';
import { traceEnqueues } from '../../shared/producer/otel.ts';
import { createRelay } from '../../shared/relay/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

const exporter = new InMemorySpanExporter();
const contextManager = new AsyncLocalStorageContextManager();
let db: TestDatabase;
let bus: LocalBus;
beforeAll(async () => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
  );
  traceEnqueues();
  db = await createTestDatabase();
  bus = await startLocalBus();
});
afterAll(async () => {
  traceEnqueues(false);
  trace.disable();
  context.disable();
  await db?.drop();
  await bus?.close();
});

/** The event a rule's Lambda target receives for what the bus accepted. */
const lambdaEvent = (accepted: AcceptedEvent): EventBridgeEvent<string, unknown> => ({
  version: '0',
  id: accepted.id,
  'detail-type': accepted.detailType,
  source: accepted.source,
  account: '123456789012',
  time: accepted.time ?? new Date().toISOString(),
  region: 'us-east-1',
  resources: [],
  detail: accepted.detail,
});

const metadataOf = (e: AcceptedEvent | undefined) =>
  (e?.detail.metadata ?? {}) as { aggregateId?: string; eventId?: string; traceparent?: string };

describe('trace context, producer to consumer', () => {
  it("carries the request's trace through enqueue, the relay's publish span and the bus into the inbox's span", async () => {
    const tracer = trace.getTracer('test-producer');
    const aggregateId = randomUUID();
    const request = await tracer.startActiveSpan('POST /orders', async (span: Span) => {
      await db.sql.begin((tx) =>
        enqueue(tx, {
          type: 'OrderPlaced',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId,
          payload: {},
        }),
      );
      span.end();
      return span.spanContext();
    });
    // Outside any span: stored and published without a trace.
    const untracedId = randomUUID();
    await db.sql.begin((tx) =>
      enqueue(tx, {
        type: 'OrderPlaced',
        source: 'shop.orders',
        aggregateType: 'order',
        aggregateId: untracedId,
        payload: {},
      }),
    );

    const relay = createRelay({
      env: { DATABASE_URL: db.url, EVENT_BUS_NAME: 'traced-bus' },
      applicationName: 'trace-context',
      clientConfig: {
        endpoint: bus.url,
        region: 'us-east-1',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      },
    });
    expect(await relay.run({ untilEmpty: true })).toMatchObject({ published: 2 });
    await relay.close();

    const traceparent = `00-${request.traceId}-${request.spanId}-01`;
    const [published] = bus.events.filter(
      (e) => e.detail.metadata && (e.detail.metadata as { aggregateId: string }).aggregateId === aggregateId,
    );
    const [untraced] = bus.events.filter(
      (e) => (e.detail.metadata as { aggregateId: string }).aggregateId === untracedId,
    );
    expect(published?.traceHeader).toBe(
      `Root=1-${request.traceId.slice(0, 8)}-${request.traceId.slice(8)};Parent=${request.spanId};Sampled=1`,
    );
    expect(metadataOf(published).traceparent).toBe(traceparent);
    expect(untraced?.traceHeader).toBeUndefined();
    expect(untraced?.detail.metadata).not.toHaveProperty('traceparent');

    const publish = exporter.getFinishedSpans().filter((s) => s.name === 'outbox.publish');
    expect(publish).toHaveLength(1);
    expect(publish[0]?.kind).toBe(SpanKind.PRODUCER);
    expect(publish[0]?.attributes['messaging.batch.message_count']).toBe(2);
    expect(
      publish[0]?.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.['outbox.event_id']]),
    ).toEqual([[request.traceId, request.spanId, metadataOf(published).eventId]]);

    const handler = inbox(
      { sql: db.sql, consumer: 'traced', metrics: false, tracing: inboxTracing },
      async () => ({ done: true }),
    );
    const event = lambdaEvent(published as AcceptedEvent);
    expect(await handler(event, lambdaContext(10_000))).toEqual({ done: true });
    expect(await handler(event, lambdaContext(10_000))).toMatchObject({ inbox: 'duplicate' });

    const inboxSpans = exporter.getFinishedSpans().filter((s) => s.name === 'outbox.inbox traced');
    expect(inboxSpans).toHaveLength(2);
    for (const span of inboxSpans) {
      expect(span.kind).toBe(SpanKind.CONSUMER);
      expect(span.spanContext().traceId).toBe(request.traceId);
      expect(span.parentSpanContext?.spanId).toBe(request.spanId);
      expect(span.links.map((l) => l.context.spanId)).toEqual([request.spanId]);
    }
    expect(inboxSpans.map((s) => s.attributes)).toEqual([
      {
        'outbox.consumer': 'traced',
        'outbox.event_id': metadataOf(published).eventId,
        'outbox.sequence': '1',
        'outbox.outcome': 'applied',
      },
      expect.objectContaining({ 'outbox.outcome': 'duplicate' }),
    ]);
  });

  it("records the handler's failure on the inbox's span, and starts a root span for an event without a trace", async () => {
    exporter.reset();
    const handler = inbox(
      { sql: db.sql, consumer: 'traced-failing', metrics: false, tracing: inboxTracing },
      async () => {
        throw new Error('billing is down');
      },
    );
    const event = lambdaEvent({
      id: randomUUID(),
      eventBusName: 'b',
      source: 'shop.orders',
      detailType: 'OrderPlaced',
      detail: {
        metadata: {
          eventId: randomUUID(),
          aggregateType: 'order',
          aggregateId: randomUUID(),
          sequence: 1,
          occurredAt: new Date().toISOString(),
        },
        data: {},
      },
    } as unknown as AcceptedEvent);
    await expect(handler(event, lambdaContext(10_000))).rejects.toThrow('billing is down');
    const [span] = exporter.getFinishedSpans();
    expect(span?.attributes['outbox.outcome']).toBe('failed');
    expect(span?.status).toMatchObject({ code: 2, message: 'billing is down' });
    expect(span?.parentSpanContext).toBeUndefined();
    expect(span?.links).toEqual([]);
  });
});
