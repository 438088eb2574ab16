/**
 * The two tracing set-ups of docs/observe.md#with-powertools-tracer-or-the-opentelemetry-lambda-layer,
 * run for real from their files in examples/observe/ (which the docs quote verbatim): a consumer under
 * a tracer provider registered globally before the handler, as the OpenTelemetry Lambda layer
 * does, whose invocation span wraps the handler; and a producer traced by Powertools Tracer (X-Ray,
 * no OpenTelemetry) passing the Lambda's `_X_AMZN_TRACE_ID` as the event's trace header. Each event
 * goes through the real relay and the local bus; the consumer's span is recorded by the in-memory
 * exporter and must be in the producer's trace, or link to it.
 */
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { context, ROOT_CONTEXT, type Span, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { Context, EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AcceptedEvent, type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { idsOfTraceHeader } from '../../shared/platform/trace-context.ts';
import { enqueue } from '../../shared/producer/enqueue.ts';
import { traceEnqueues } from '../../shared/producer/otel.ts';
import { createRelay } from '../../shared/relay/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const exporter = new InMemorySpanExporter();
let db: TestDatabase;
let bus: LocalBus;
let consumer: typeof import('../../examples/observe/otel-layer-consumer.ts');
let producer: typeof import('../../examples/observe/powertools-producer.ts');

beforeAll(async () => {
  // What the layer's start-up does before the handler's module loads (NodeTracerProvider's
  // register(): a context manager on AsyncLocalStorage and the provider, both global).
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
  );
  db = await createTestDatabase();
  await db.sql`create table invoices (event_id uuid primary key)`;
  await db.sql`create table orders (id text primary key, total numeric not null)`;
  bus = await startLocalBus();
  // The examples' pool connects with DATABASE_URL when first used.
  process.env.DATABASE_URL = db.url;
  consumer = await import('../../examples/observe/otel-layer-consumer.ts');
  producer = await import('../../examples/observe/powertools-producer.ts');
});
afterAll(async () => {
  traceEnqueues(false);
  trace.disable();
  context.disable();
  await consumer?.pool.end(5);
  await db?.drop();
  await bus?.close();
  delete process.env._X_AMZN_TRACE_ID;
});

/** Publishes what is pending with the real relay, and returns the bus's entry of `aggregateId`. */
async function publish(aggregateId: string): Promise<AcceptedEvent> {
  const relay = createRelay({
    env: { DATABASE_URL: db.url, EVENT_BUS_NAME: 'traced-bus' },
    applicationName: 'tracing-examples',
    clientConfig: {
      endpoint: bus.url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    },
  });
  await relay.run({ untilEmpty: true });
  await relay.close();
  const entry = bus.events.find(
    (e) => (e.detail.metadata as { aggregateId?: string } | undefined)?.aggregateId === aggregateId,
  );
  if (!entry) throw new Error(`the bus holds no event of ${aggregateId}`);
  return entry;
}

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

/**
 * Invokes the example's handler as the layer's Lambda instrumentation does: inside an invocation
 * span (kind SERVER) whose parent is `parent` (the root context when no context is propagated to
 * the function, the producer's when the layer's X-Ray propagator reads Lambda's `_X_AMZN_TRACE_ID`).
 */
async function invokeUnderLayer(
  event: EventBridgeEvent<string, unknown>,
  lambda: Context,
  parent = ROOT_CONTEXT,
) {
  return trace
    .getTracer('@opentelemetry/instrumentation-aws-lambda')
    .startActiveSpan(lambda.functionName, { kind: SpanKind.SERVER }, parent, async (span: Span) => {
      try {
        return { result: await consumer.handler(event, lambda), invocation: span.spanContext() };
      } finally {
        span.end();
      }
    });
}

const inboxSpanOf = (eventId: string): ReadableSpan => {
  const spans = exporter
    .getFinishedSpans()
    .filter((s) => s.name === 'outbox.inbox billing' && s.attributes['outbox.event_id'] === eventId);
  expect(spans).toHaveLength(1);
  return spans[0] as ReadableSpan;
};

describe('tracing examples (docs/observe.md)', () => {
  it('the docs quote the example files verbatim', async () => {
    const docs = await readFile(`${root}docs/observe.md`, 'utf8');
    for (const name of ['otel-layer-consumer.ts', 'powertools-producer.ts']) {
      const source = await readFile(`${root}examples/observe/${name}`, 'utf8');
      expect(docs, name).toContain(`\`\`\`ts\n${source}\`\`\``);
    }
  });

  it("OpenTelemetry Lambda layer: the inbox's span is a child of the invocation span and links the producer's request", async () => {
    traceEnqueues();
    const aggregateId = randomUUID();
    const request = await trace.getTracer('shop').startActiveSpan('POST /orders', async (span: Span) => {
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
    traceEnqueues(false);
    const accepted = await publish(aggregateId);
    const eventId = (accepted.detail.metadata as { eventId: string }).eventId;

    // No context propagated to the function: the layer's span starts a trace of its own.
    const { result, invocation } = await invokeUnderLayer(
      lambdaEvent(accepted),
      lambdaContext(10_000, 'billing'),
    );
    expect(result).toEqual({ invoiced: eventId });
    const span = inboxSpanOf(eventId);
    expect(span.kind).toBe(SpanKind.CONSUMER);
    expect(span.spanContext().traceId).toBe(invocation.traceId);
    expect(span.parentSpanContext?.spanId).toBe(invocation.spanId);
    expect(span.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([
      [request.traceId, request.spanId],
    ]);
    expect(span.attributes['outbox.outcome']).toBe('applied');
    expect(await db.sql`select event_id from invoices where event_id = ${eventId}`).toHaveLength(1);

    // With X-Ray active tracing, Lambda's _X_AMZN_TRACE_ID is the entry's TraceHeader; the layer's
    // X-Ray propagator makes it the invocation span's parent: one trace from the request on.
    exporter.reset();
    const header = idsOfTraceHeader(accepted.traceHeader);
    expect(header).toBeDefined();
    const propagated = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: header?.traceId as string,
      spanId: header?.spanId as string,
      traceFlags: 1,
      isRemote: true,
    });
    const again = await invokeUnderLayer(lambdaEvent(accepted), lambdaContext(10_000, 'billing'), propagated);
    expect(again.result).toMatchObject({ inbox: 'duplicate' });
    expect(again.invocation.traceId).toBe(request.traceId);
    expect(inboxSpanOf(eventId).spanContext().traceId).toBe(request.traceId);
  });

  it("Powertools Tracer in the producer: the Lambda's X-Ray header becomes the event's trace, which the consumer's span continues", async () => {
    const root = '1-6752e0a1-5f1c3a9b2e4d6f8a0b1c2d3e';
    const parent = '53995c3f42cd8ad8';
    // As Lambda sets it for a traced invocation (Lineage included).
    process.env._X_AMZN_TRACE_ID = `Root=${root};Parent=${parent};Sampled=1;Lineage=1:a1b2c3d4:0`;
    const orderId = randomUUID();
    await producer.placeOrder(db.sql, orderId, 42);
    delete process.env._X_AMZN_TRACE_ID;
    const accepted = await publish(orderId);
    expect(accepted.traceHeader).toBe(`Root=${root};Parent=${parent};Sampled=1;Lineage=1:a1b2c3d4:0`);
    const traceId = root.slice(2).replace('-', '');
    expect((accepted.detail.metadata as { traceparent?: string }).traceparent).toBe(
      `00-${traceId}-${parent}-01`,
    );

    exporter.reset();
    const eventId = (accepted.detail.metadata as { eventId: string }).eventId;
    // No layer span active: the inbox's span is a child of the producer's X-Ray segment.
    await expect(consumer.handler(lambdaEvent(accepted), lambdaContext(10_000, 'billing'))).resolves.toEqual({
      invoiced: eventId,
    });
    const span = inboxSpanOf(eventId);
    expect(span.spanContext().traceId).toBe(traceId);
    expect(span.parentSpanContext?.spanId).toBe(parent);
    expect(span.links.map((l) => l.context.spanId)).toEqual([parent]);
  });
});
