/**
 * Every value arrives as committed: the bus receives each number of a payload exactly as Postgres
 * stores it (no trip through a JavaScript double), and ids, sequences and counts reach the bus,
 * the API and the CLI's output without a lossy type. Assertions read the Detail text as the bus
 * received it, never a parse of it.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compactJsonb, entrySize, OutboxValidationError } from '../../shared/platform/index.ts';
import { enqueue } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { listDeadLetters, showDeadLetter } from '../../shared/relay/operations/index.ts';
import { cliEnv, runCli } from '../support/cli.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness({ max: 6 });

const relayAll = (overrides: Parameters<typeof testSettings>[0] = {}) =>
  runRelay({
    sql: h.db.sql,
    client: testClient(h.bus.url),
    settings: testSettings(overrides),
    untilEmpty: true,
  });

/** `JSON.rawJSON`, which Node 22+ has and this project's TypeScript lib does not declare yet. */
const rawJSON = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON;

/** The Detail text the bus received, one per accepted event, in arrival order. */
const details = () => h.bus.events.map((e) => e.detailText);

/** The `data` member of a Detail text, as sent (it is the Detail's last member). */
const dataOf = (detail: string | undefined) => {
  const at = detail?.indexOf(',"data":') ?? -1;
  return at < 0 ? undefined : detail?.slice(at + ',"data":'.length, -1);
};

/** 1e-400, as Postgres spells it: 0, a point, 399 zeros and a 1. */
const TINY = `0.${'0'.repeat(399)}1`;

describe('numbers in payloads reach the bus exactly as committed', () => {
  it('through outbox_enqueue in SQL: big integers, long decimals, tiny and negative numbers, trailing zeros', async () => {
    await h.db.sql.begin(
      (tx) => tx`select * from outbox_enqueue(event_type => 'OrderPlaced', source => 'shop.orders',
        aggregate_type => 'order', aggregate_id => 'exact-1',
        payload => ${'{"orderId": 1234567890123456789, "amount": 0.12345678901234567890123, "tiny": 1e-400, "min": -9223372036854775808, "list": [1.50, 2e2, {"x": 3.000}], "s": "a: b, c \\" d\\\\", "k, :": {"v : ,": null}}'}::text::jsonb)`,
    );
    const result = await relayAll();
    expect(result.published).toBe(1);
    expect(dataOf(details()[0])).toBe(
      `{"s":"a: b, c \\" d\\\\","min":-9223372036854775808,"k, :":{"v : ,":null},"list":[1.50,200,{"x":3.000}],"tiny":${TINY},"amount":0.12345678901234567890123,"orderId":1234567890123456789}`,
    );
  });

  it('through enqueue() in TypeScript with JSON.rawJSON, up to the int64 bounds, which both validators share', async () => {
    await h.db.sql.begin((tx) =>
      enqueue(tx, {
        type: 'OrderPlaced',
        source: 'shop.orders',
        aggregateType: 'order',
        aggregateId: 'exact-2',
        payload: {
          max: rawJSON('9223372036854775807'),
          min: rawJSON('-9223372036854775808'),
          amount: rawJSON('0.12345678901234567890123'),
          plain: 0.1,
        },
      }),
    );
    await relayAll();
    expect(dataOf(details()[0])).toBe(
      '{"max":9223372036854775807,"min":-9223372036854775808,"plain":0.1,"amount":0.12345678901234567890123}',
    );
    for (const [literal, field] of [
      ['9223372036854775808', 'payload.over'],
      ['-9223372036854775809', 'payload.over'],
      ['9223372036854775808.5', 'payload.over'],
      ['1e19', 'payload.over'],
    ] as const) {
      const attempt = h.db.sql.begin((tx) =>
        enqueue(tx, {
          type: 'T',
          source: 's',
          aggregateType: 'order',
          aggregateId: 'exact-3',
          payload: { over: rawJSON(literal) },
        }),
      );
      await expect(attempt, literal).rejects.toThrow(OutboxValidationError);
      await expect(attempt, literal).rejects.toMatchObject({ field });
    }
    // Just inside the bounds, as the SQL function accepts them.
    await h.db.sql.begin((tx) =>
      enqueue(tx, {
        type: 'T',
        source: 's',
        aggregateType: 'order',
        aggregateId: 'exact-3',
        payload: { a: rawJSON('9223372036854775807.5'), b: rawJSON('-9223372036854775808.0') },
      }),
    );
  });

  it('through outbox enqueue on the command line (JSON lines)', async () => {
    const line =
      '{"type":"OrderPlaced","source":"shop.orders","aggregateType":"order","aggregateId":"exact-4","payload":{"orderId":1234567890123456789,"amount":0.12345678901234567890123,"tiny":1e-400}}';
    const r = await runCli(['enqueue'], { env: cliEnv(h), stdin: `${line}\n` });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    await relayAll();
    expect(dataOf(details()[0])).toBe(
      `{"tiny":${TINY},"amount":0.12345678901234567890123,"orderId":1234567890123456789}`,
    );
  });

  it('keeps every relayed entry within the size enqueue validated, counted as EventBridge counts it', async () => {
    const payload =
      '{"tiny": 1e-300, "big": 1e18, "x": [1.0, 2.00, 3.000], "s": "  spaced  out  : ,  ", "nested": {"deep": [0.5e-10]}}';
    // The smallest limit outbox_enqueue accepts for this event is the size it validated.
    const passes = (limit: number) =>
      h.db.sql
        .begin(
          (tx) =>
            tx`select outbox_enqueue_check('Sized', 'shop.sizes', 'order', 'sized', ${payload}::text::jsonb, null, null, ${limit}::integer, null)`,
        )
        .then(
          () => true,
          () => false,
        );
    let low = 1;
    let high = 4_096;
    while (low < high) {
      const mid = Math.floor((low + high) / 2);
      if (await passes(mid)) high = mid;
      else low = mid + 1;
    }
    const fits = (limit: number) =>
      h.db.sql.begin(
        (tx) => tx`select * from outbox_enqueue(event_type => 'Sized', source => 'shop.sizes',
          aggregate_type => 'order', aggregate_id => 'sized', payload => ${payload}::text::jsonb,
          max_entry_bytes => ${limit}::integer)`,
      );
    await expect(fits(low - 1)).rejects.toMatchObject({ code: '22023', column_name: 'payload' });
    await fits(low);
    await relayAll({ maxRequestBytes: low });
    expect(h.bus.events).toHaveLength(1);
    const accepted = h.bus.events[0];
    const size = entrySize({
      Source: accepted?.source,
      DetailType: accepted?.detailType,
      Detail: accepted?.detailText,
      Time: new Date(),
    });
    expect(size).toBeLessThanOrEqual(low);
    // The bytes the SQL validator measures for the payload are exactly the bytes the relay sends.
    const [measured] = await h.db.sql<
      { n: number }[]
    >`select outbox_json_bytes(${payload}::text::jsonb) as n`;
    expect(Buffer.byteLength(dataOf(accepted?.detailText) ?? '')).toBe(measured?.n);
  });

  it('compacts jsonb text to exactly the bytes outbox_json_bytes counts, keeping strings verbatim (property)', async () => {
    const texts = fc.sample(
      fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify({ v })),
      { numRuns: 300, seed: 18 },
    );
    const rows = await h.db.sql<{ input: string; text: string; bytes: number }[]>`
      select t.input, t.input::jsonb::text as text, outbox_json_bytes(t.input::jsonb) as bytes
      from unnest(${texts}::text[]) as t(input)`;
    for (const row of rows) {
      const compact = compactJsonb(row.text);
      expect(Buffer.byteLength(compact), row.text).toBe(row.bytes);
      expect(JSON.parse(compact)).toEqual(JSON.parse(row.text));
    }
  });
});

describe('ids and sequences beyond 2^53 reach the bus, the API and the CLI exactly', () => {
  it('as decimal text end to end, and as number literals in the Detail and in --json', async () => {
    await h.db.sql`alter table outbox alter column id restart with 9007199254740993`;
    await h.db.sql`
      insert into outbox_aggregate (aggregate_type, aggregate_id, last_sequence) values ('order', 'huge', 9007199254740992)`;
    try {
      const [first, second] = await h.db.sql.begin(async (tx) => [
        await enqueue(tx, {
          type: 'OrderPlaced',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId: 'huge',
          payload: { n: 1 },
        }),
        await enqueue(tx, {
          type: 'OrderPlaced',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId: 'huge',
          payload: { n: 2, poison: true },
        }),
      ]);
      expect(first?.sequence).toBe('9007199254740993');
      expect(second?.sequence).toBe('9007199254740994');

      h.bus.setFaults({ poisonMarker: '"poison":true', poisonCode: 'InvalidArgument' });
      await relayAll();
      expect(details()).toHaveLength(1);
      expect(details()[0]).toContain('"sequence":9007199254740993,');

      const [dead] = await listDeadLetters(h.db.sql);
      expect(dead).toMatchObject({ id: '9007199254740994', sequence: '9007199254740994' });
      const shown = await showDeadLetter(h.db.sql, '9007199254740994');
      expect(shown?.payloadJson).toBe('{"n":2,"poison":true}');

      const list = await runCli(['dead-letters', 'list', '--json'], { env: cliEnv(h) });
      expect(list.stdout).toContain('"id":"9007199254740994"');
      expect(list.stdout).toContain('"sequence":9007199254740994,');
      const text = await runCli(['dead-letters', 'list'], { env: cliEnv(h) });
      expect(text.stdout).toMatch(/^9007199254740994\t.*\torder\/huge\t9007199254740994\t/m);
    } finally {
      await h.db.sql`alter table outbox alter column id restart with 1`;
    }
  });

  it('dead-letters show prints the payload exactly, for a terminal and with --json', async () => {
    await h.db.sql.begin(
      (tx) => tx`select * from outbox_enqueue(event_type => 'OrderPlaced', source => 'shop.orders',
        aggregate_type => 'order', aggregate_id => 'show-exact',
        payload => '{"orderId": 1234567890123456789, "amount": 0.12345678901234567890123}'::jsonb)`,
    );
    await h.db.sql`update outbox set dead_lettered_at = now(), last_error = 'InvalidArgument: test'`;
    const [dead] = await listDeadLetters(h.db.sql);
    const json = await runCli(['dead-letters', 'show', dead?.eventId as string, '--json'], {
      env: cliEnv(h),
    });
    expect(json.stdout).toContain(
      '"payload":{"amount":0.12345678901234567890123,"orderId":1234567890123456789}',
    );
    const text = await runCli(['dead-letters', 'show', dead?.eventId as string], { env: cliEnv(h) });
    expect(text.stdout).toContain('"orderId": 1234567890123456789');
    expect(text.stdout).toContain('"amount": 0.12345678901234567890123');
  });
});
