/**
 * Nothing to pay without OpenTelemetry (docs/observe.md#nothing-to-pay-without-it): the producer's
 * main entry point does not import `@opentelemetry/api`, its bundle is the same size whether or not
 * the package is installed, and an enqueue inside an active span stores no trace header until
 * `traceEnqueues()` is called. Bundled with esbuild as a user's NodejsFunction does
 * (scripts/measure.ts), from a producer that imports the package by its name.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { context, type Span, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { build, type Plugin } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AS_NODEJS_FUNCTION } from '../../scripts/measure.ts';
import { enqueue } from '../../shared/producer/enqueue.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** Resolves no `@opentelemetry/*` import: a service that did not install it. */
const withoutOpenTelemetry: Plugin = {
  name: 'without-opentelemetry',
  setup(b) {
    b.onResolve({ filter: /^@opentelemetry\// }, (args) => ({
      errors: [{ text: `${args.path} is not installed` }],
    }));
  },
};

/** A producer's bundle of `source` (postgres left out: the service has it either way). */
async function bundle(source: string, plugins: Plugin[] = []) {
  const result = await build({
    ...AS_NODEJS_FUNCTION,
    plugins,
    stdin: { contents: source, resolveDir: root, loader: 'ts', sourcefile: 'producer.ts' },
    external: ['postgres'],
    metafile: true,
    logLevel: 'silent', // the refused import is expected: the test reads the error
  });
  return {
    bytes: result.outputFiles[0]?.contents.byteLength ?? 0,
    inputs: Object.keys(result.metafile.inputs),
  };
}

const PLAIN = `import { enqueue } from 'outbox-relay-aws';\nexport const handler = (tx: never) => enqueue(tx, {} as never);\n`;
const TRACED = `import { traceEnqueues } from 'outbox-relay-aws/otel';\ntraceEnqueues();\n${PLAIN}`;
/** Most the `/otel` entry may add to the producer's minified bundle, bytes (the API's own code). */
const MAX_OTEL_BYTES = 16_000;

describe('the producer without OpenTelemetry', () => {
  it("the main entry's bundle holds no @opentelemetry module; the /otel entry's does, and what it adds is the API", async () => {
    const plain = await bundle(PLAIN);
    const traced = await bundle(TRACED);
    expect(plain.inputs.some((p) => p.includes('shared/producer/enqueue.ts'))).toBe(true);
    expect(
      plain.inputs.filter((p) => p.includes('@opentelemetry/') || p.endsWith('producer/otel.ts')),
    ).toEqual([]);
    // The same check finds the API when it is imported.
    expect(traced.inputs.some((p) => p.includes('node_modules/@opentelemetry/api/'))).toBe(true);
    expect(traced.bytes).toBeGreaterThan(plain.bytes);
    expect(traced.bytes - plain.bytes).toBeLessThan(MAX_OTEL_BYTES);
    // Without the package installed: the same bytes from the main entry; the /otel entry cannot build.
    expect((await bundle(PLAIN, [withoutOpenTelemetry])).bytes).toBe(plain.bytes);
    await expect(bundle(TRACED, [withoutOpenTelemetry])).rejects.toThrow(
      /@opentelemetry\/api is not installed/,
    );
    console.log(
      `producer bundle (esbuild, minified, ESM, postgres external): main entry ${plain.bytes} B; with /otel ${traced.bytes} B (+${traced.bytes - plain.bytes} B)`,
    );
  });
});

describe('enqueue inside a span, without traceEnqueues()', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(new BasicTracerProvider());
    db = await createTestDatabase();
  });
  afterAll(async () => {
    trace.disable();
    context.disable();
    await db?.drop();
  });

  it('stores no trace header: the span is not read unless the producer opted in', async () => {
    const aggregateId = randomUUID();
    const active = await trace.getTracer('shop').startActiveSpan('POST /orders', async (span: Span) => {
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
    expect(trace.isSpanContextValid(active)).toBe(true);
    const rows = await db.sql`select trace_header from outbox.outbox where aggregate_id = ${aggregateId}`;
    expect(rows).toEqual([{ trace_header: null }]);
  });
});
