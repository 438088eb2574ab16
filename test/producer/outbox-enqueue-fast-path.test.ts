/**
 * `outbox_enqueue`'s single-event path (migration 011) skips the full checker when cheap
 * conditions already imply that it would pass. These tests hold it to that: for events near every
 * limit (lengths in UTF-8 bytes and UTF-16 code units, white space, `aws.` sources, big numbers,
 * deep nesting, the entry size), `outbox_enqueue` accepts exactly what `outbox_enqueue_check`
 * accepts and refuses the rest with the checker's own error; and it numbers events (sequence,
 * typeSequence) as the many-events path does.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { useHarness } from '../support/harness.ts';

const h = useHarness();

interface Candidate {
  eventType: string | null;
  source: string | null;
  aggregateType: string | null;
  aggregateId: string | null;
  payloadJson: string;
  traceHeader: string | null;
  maxEntryBytes: number;
  /** None when absent. */
  idempotencyKey?: string | undefined;
}

/** The outcome of a statement: 'ok', or the error's SQLSTATE, column and message. */
async function outcome(run: () => Promise<unknown>): Promise<string> {
  try {
    await run();
    return 'ok';
  } catch (error) {
    const e = error as { code?: string; column_name?: string; message?: string };
    return `${e.code} ${e.column_name} ${e.message}`;
  }
}

// Pieces that sit on either side of each cheap condition: printable ASCII, white space first
// (ASCII and not), letters of 2 and 3 UTF-8 bytes, a letter of 2 UTF-16 code units, digits.
const piece = fc.constantFrom('a', 'Z', '.', ' ', '\t', '\u00a0', 'é', '中', '😀', '7', 'aws.', 'AWS.');
const text = (around: number) =>
  fc.oneof(
    // Mostly valid, so that whole events pass as often as they fail; and the limits exactly.
    {
      weight: 12,
      arbitrary: fc.constantFrom(
        'OrderPlaced',
        'shop.orders',
        'x',
        'a'.repeat(around),
        'a'.repeat(around + 1),
        'é'.repeat(around),
        '😀'.repeat(around / 2),
        `${'😀'.repeat(around / 2)}a`,
        ` ${'a'.repeat(around - 1)}`,
      ),
    },
    { weight: 1, arbitrary: fc.constantFrom(null, '') },
    { weight: 2, arbitrary: fc.array(piece, { minLength: 1, maxLength: 6 }).map((a) => a.join('')) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.array(piece, { maxLength: 3 }), fc.integer({ min: around - 3, max: around + 1 }), piece)
        .map(([head, n, fill]) => head.join('') + fill.repeat(Math.max(0, n - head.join('').length))),
    },
  );
const payload = fc.oneof(
  { weight: 6, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify({ v })) },
  { weight: 2, arbitrary: fc.bigInt({ min: -(2n ** 64n), max: 2n ** 64n }).map((n) => `{"n": ${n}}`) },
  {
    weight: 1,
    arbitrary: fc.integer({ min: 995, max: 1_005 }).map((d) => `{"a": ${'['.repeat(d)}${']'.repeat(d)}}`),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom('[]', '"s"', '1', 'null', '{"s": "1234567890123456789"}', '{"x": 1.25e3}'),
  },
);

/** Runs the checker, outbox_enqueue and outbox_enqueue_many on one candidate, each in a transaction rolled back. */
async function compare(c: Candidate): Promise<{ checked: string; enqueued: string }> {
  const checked = await outcome(() =>
    h.db.sql.begin(async (tx) => {
      if (c.maxEntryBytes < 1 || c.maxEntryBytes > 1_048_576)
        await tx`select outbox_enqueue_reject('max_entry_bytes', 'must be a number of bytes from 1 to 1048576 (the largest entry EventBridge accepts)', null)`;
      await tx`select outbox_enqueue_check(${c.eventType}, ${c.source}, ${c.aggregateType}, ${c.aggregateId}, ${c.payloadJson}::text::jsonb, ${c.idempotencyKey ?? null}, ${c.traceHeader}, ${c.maxEntryBytes}, null)`;
      await tx`rollback and chain`;
    }),
  );
  const enqueued = await outcome(() =>
    h.db.sql.begin(async (tx) => {
      await tx`select * from outbox_enqueue(
        event_type => ${c.eventType}, source => ${c.source}, aggregate_type => ${c.aggregateType},
        aggregate_id => ${c.aggregateId}, payload => ${c.payloadJson}::text::jsonb, trace_header => ${c.traceHeader},
        max_entry_bytes => ${c.maxEntryBytes}, idempotency_key => ${c.idempotencyKey ?? null})`;
      await tx`rollback and chain`;
    }),
  );
  // One event through outbox_enqueue_many (what enqueue() sends): the same answer.
  const many = await outcome(() =>
    h.db.sql.begin(async (tx) => {
      await tx`select * from outbox_enqueue_many(
        array[${c.eventType}]::text[], array[${c.source}]::text[], array[${c.aggregateType}]::text[],
        array[${c.aggregateId}]::text[], array[${c.payloadJson}::text::jsonb], array[${c.idempotencyKey ?? null}]::text[],
        array[${c.traceHeader}]::text[], ${c.maxEntryBytes})`;
      await tx`rollback and chain`;
    }),
  );
  expect(many).toBe(enqueued);
  return { checked, enqueued };
}

const valid: Candidate = {
  eventType: 'OrderPlaced',
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId: '42',
  payloadJson: '{"total": 1}',
  traceHeader: null,
  maxEntryBytes: 1_048_576,
};
/** Every field at its limit in bytes, and a payload whose text is 2,001 bytes long. */
const largest: Candidate = {
  eventType: 'a'.repeat(128),
  source: 's'.repeat(256),
  aggregateType: 't'.repeat(512),
  aggregateId: 'i'.repeat(512),
  payloadJson: `{"p": "${'x'.repeat(1_992)}"}`,
  traceHeader: 'h'.repeat(500),
  maxEntryBytes: 1_048_576,
};
const limits = {
  eventType: 128,
  source: 256,
  aggregateType: 512,
  aggregateId: 512,
  traceHeader: 500,
} as const;
/** Each text field's values on either side of its limit and of the cheap conditions. */
const edges = (n: number) => [
  null,
  '',
  ' ',
  '\u00a0x',
  ' x',
  'a'.repeat(n),
  'a'.repeat(n + 1),
  'é'.repeat(n),
  'é'.repeat(n + 1),
  '😀'.repeat(n / 2),
  `${'😀'.repeat(n / 2)}a`,
  `é${'a'.repeat(n)}`,
  'aws.x',
  'AWS.x',
];
const payloadEdges = [
  '{}',
  '[]',
  '"s"',
  'null',
  '{"n": 999999999999999999}',
  '{"n": 9223372036854775807}',
  '{"n": 9223372036854775808}',
  '{"n": -9223372036854775808}',
  '{"n": -9223372036854775809}',
  '{"n": 9223372036854775807.5}',
  '{"s": "12345678901234567890"}',
  `{"a": ${'['.repeat(999)}${']'.repeat(999)}}`,
  `{"a": ${'['.repeat(1000)}${']'.repeat(1000)}}`,
  `{"s": "${'x'.repeat(3000)}"}`,
];

describe('outbox_enqueue, the single-event path', () => {
  it('agrees with outbox_enqueue_check on each field at its limits', async () => {
    const cases: Candidate[] = [
      ...Object.entries(limits).flatMap(([field, n]) => edges(n).map((v) => ({ ...valid, [field]: v }))),
      ...payloadEdges.map((p) => ({ ...valid, payloadJson: p })),
      ...[0, 1, 300, 400, 1_048_577].map((m) => ({ ...valid, maxEntryBytes: m })),
      // The largest event the cheap conditions let through: every field at its limit, a payload of
      // 2,001 characters. The checker counts its entry as 3,635 bytes; the cheap bound is 8,793,
      // below which outbox_enqueue leaves the decision to the checker (migration 015) and from
      // which it decides alone.
      ...[3_634, 3_635, 8_792, 8_793, 8_794, 1_048_576].map((m) => ({ ...largest, maxEntryBytes: m })),
      ...[3_634, 3_635, 8_793].map((m) => ({ ...largest, idempotencyKey: 'k', maxEntryBytes: m })),
    ];
    let accepted = 0;
    for (const c of cases) {
      const { checked, enqueued } = await compare(c);
      expect({ c, enqueued }).toEqual({ c, enqueued: checked });
      if (enqueued === 'ok') accepted++;
    }
    expect(accepted).toBeGreaterThan(10);
    expect(accepted).toBeLessThan(cases.length - 10);
  });

  it('accepts exactly what outbox_enqueue_check accepts, and refuses with its error', async () => {
    const seen = new Set<string>();
    await fc.assert(
      fc.asyncProperty(
        fc.record<Candidate>({
          eventType: text(128),
          source: text(256),
          aggregateType: text(512),
          aggregateId: text(512),
          payloadJson: payload,
          traceHeader: text(500),
          maxEntryBytes: fc.constantFrom(1_048_576, 1_048_576, 1_048_576, 8_793, 8_792, 600, 700, 0),
          idempotencyKey: fc.constantFrom(undefined, undefined, undefined, 'k'),
        }),
        async (c) => {
          const { checked, enqueued } = await compare(c);
          expect(enqueued).toBe(checked);
          seen.add(enqueued === 'ok' ? 'ok' : (enqueued.split(' ')[1] ?? ''));
        },
      ),
      { numRuns: 300 },
    );
    // Both sides of the fast path were exercised, and refusals named several fields.
    expect(seen.has('ok')).toBe(true);
    expect(seen.size).toBeGreaterThan(4);
  });

  it('numbers sequence and typeSequence as outbox_enqueue_many does, for new and known aggregates', async () => {
    await h.db.sql`truncate outbox, outbox_aggregate, outbox_idempotency_key`;
    const types = ['A', 'B', 'A', 'A', 'B', 'C', 'A'];
    for (const [i, t] of types.entries()) {
      const fn = i % 2 === 0 ? 'one' : 'many';
      if (fn === 'one')
        await h.db
          .sql`select * from outbox_enqueue(event_type => ${t}, source => 's', aggregate_type => 'order', aggregate_id => '1', payload => '{}'::jsonb)`;
      else
        await h.db
          .sql`select * from outbox_enqueue_many(array[${t}], array['s'], array['order'], array['1'], array['{}'::jsonb])`;
    }
    const rows = await h.db.sql<{ event_type: string; sequence: string; type_sequence: string }[]>`
      select event_type, sequence::text, type_sequence::text from outbox order by sequence`;
    expect(rows.map((r) => `${r.sequence}:${r.event_type}${r.type_sequence}`)).toEqual([
      '1:A1',
      '2:B1',
      '3:A2',
      '4:A3',
      '5:B2',
      '6:C1',
      '7:A4',
    ]);
  });
});
