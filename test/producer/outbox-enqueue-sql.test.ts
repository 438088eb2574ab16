/**
 * `outbox_enqueue`, the database function that lets any driver, ORM or language enqueue in its own
 * transaction: what it returns, the rules it applies (SQLSTATE 22023, COLUMN = the field), and an
 * event enqueued from psql reaching the bus like any other.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import type { Envelope } from '../../shared/platform/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness();
const run = promisify(execFile);

const count = async () => Number((await h.db.sql<{ n: string }[]>`select count(*) as n from outbox`)[0]?.n);

async function relayAll(): Promise<number> {
  const r = await runRelay({
    sql: h.db.sql,
    client: testClient(h.bus.url),
    settings: testSettings(),
    untilEmpty: true,
  });
  return r.published;
}

describe('outbox_enqueue (SQL)', () => {
  it('is relayed to the bus like any other event when called from psql inside a transaction', async () => {
    const script = `
      begin;
      create table if not exists shipments (id text primary key);
      insert into shipments values ('s-1');
      select event_id, sequence, duplicate from outbox_enqueue(
        event_type => 'ShipmentCreated', source => 'shop.shipping',
        aggregate_type => 'shipment', aggregate_id => 's-1',
        payload => '{"carrier": "DHL", "parcels": 2}'::jsonb,
        idempotency_key => 'shipment-s-1-created',
        trace_header => 'Root=1-5759e988-bd862e3fe1be46a994272793');
      commit;`;
    const { stdout } = await run('psql', [
      h.db.url,
      '-X',
      '-q',
      '-A',
      '-t',
      '-v',
      'ON_ERROR_STOP=1',
      '-c',
      script,
    ]);
    const [eventId, sequence, duplicate] = stdout.trim().split('|');
    expect([sequence, duplicate]).toEqual(['1', 'f']);

    expect(await relayAll()).toBe(1);
    expect(h.bus.events).toHaveLength(1);
    const e = h.bus.events[0];
    expect(e).toMatchObject({
      source: 'shop.shipping',
      detailType: 'ShipmentCreated',
      traceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793',
    });
    const detail = e?.detail as unknown as Envelope;
    expect(detail.metadata).toMatchObject({
      eventId,
      aggregateType: 'shipment',
      aggregateId: 's-1',
      sequence: 1,
    });
    expect(detail.data).toEqual({ carrier: 'DHL', parcels: 2 });
  });

  it('writes nothing when psql rolls the transaction back', async () => {
    const script = `
      begin;
      select * from outbox_enqueue(event_type => 'ShipmentCreated', source => 'shop.shipping',
        aggregate_type => 'shipment', aggregate_id => 's-2', payload => '{}'::jsonb);
      rollback;`;
    await run('psql', [h.db.url, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-c', script]);
    expect(await count()).toBe(0);
    expect(await relayAll()).toBe(0);
  });

  it('returns the event id, the sequence in commit order, and whether it was a duplicate', async () => {
    const call = (key: string | null) =>
      h.db.sql.begin(
        (tx) => tx<{ event_id: string; sequence: string; duplicate: boolean }[]>`
          select * from outbox_enqueue(event_type => 'OrderPlaced', source => 'shop.orders',
            aggregate_type => 'order', aggregate_id => '7', payload => '{"total": 1}'::jsonb,
            idempotency_key => ${key})`,
      );
    const [first] = await call('k-7');
    const [repeat] = await call('k-7');
    const [next] = await call(null);
    expect(first).toMatchObject({ sequence: '1', duplicate: false });
    expect(repeat).toEqual({ ...first, duplicate: true });
    expect(next).toMatchObject({ sequence: '2', duplicate: false });
    expect(await count()).toBe(2);
  });

  const valid = {
    event_type: 'OrderPlaced',
    source: 'shop.orders',
    aggregate_type: 'order',
    aggregate_id: '1',
    payload: '{"total": 1}',
    idempotency_key: null as string | null,
    trace_header: null as string | null,
  };
  const cases: [string, Partial<typeof valid>, string, RegExp][] = [
    ['a missing event_type', { event_type: null as unknown as string }, 'event_type', /is required/],
    ['a blank event_type', { event_type: '   ' }, 'event_type', /must not be empty/],
    ['a DetailType over 128 characters', { event_type: 't'.repeat(129) }, 'event_type', /at most 128/],
    ['a missing source', { source: null as unknown as string }, 'source', /is required/],
    ['a source starting with aws.', { source: 'AWS.orders' }, 'source', /aws\./],
    [
      'a missing aggregate_type',
      { aggregate_type: null as unknown as string },
      'aggregate_type',
      /is required/,
    ],
    ['an empty aggregate_id', { aggregate_id: '' }, 'aggregate_id', /must not be empty/],
    ['a payload that is an array', { payload: '[1, 2]' }, 'payload', /JSON object \(got array/],
    ['a payload that is null', { payload: null as unknown as string }, 'payload', /is required/],
    ['an integer beyond int64', { payload: '{"n": 10000000000000000000}' }, 'payload', /int64/],
    [
      'an entry larger than the bus accepts',
      { payload: JSON.stringify({ big: 'x'.repeat(1_048_576) }) },
      'payload',
      /over the 1048576-byte limit/,
    ],
    ['an empty idempotency key', { idempotency_key: '' }, 'idempotency_key', /must not be empty/],
    ['a trace header over 500 characters', { trace_header: 'x'.repeat(501) }, 'trace_header', /at most 500/],
    // Counted as enqueue() counts it, in UTF-16 units: 100 emoji are 200 (the relay's bus refused them).
    [
      'a DetailType of 100 emoji',
      { event_type: '\u{1F600}'.repeat(100) },
      'event_type',
      /at most 128 .*got 200/,
    ],
  ];
  it.each(cases)(
    'rejects %s with SQLSTATE 22023 naming the field, and writes nothing',
    async (_n, override, field, problem) => {
      const a = { ...valid, ...override };
      const error = await h.db.sql`
      select * from outbox_enqueue(event_type => ${a.event_type}, source => ${a.source},
        aggregate_type => ${a.aggregate_type}, aggregate_id => ${a.aggregate_id},
        payload => ${a.payload}::text::jsonb, idempotency_key => ${a.idempotency_key}, trace_header => ${a.trace_header})`.catch(
        (e: unknown) => e,
      );
      expect(error).toMatchObject({ code: '22023', column_name: field });
      expect((error as Error).message).toMatch(new RegExp(`^outbox_enqueue: ${field}: `));
      expect((error as Error).message).toMatch(problem);
      expect(await count()).toBe(0);
    },
  );

  it('refuses arrays that are not one-dimensional from index 1 (their elements would skip the checks), naming the argument', async () => {
    const call = (traceHeaders: string) =>
      h.db.sql
        .unsafe(`select * from outbox_enqueue_many(array['T'], array['shop.orders'], array['order'], array['1'],
          array['{}'::jsonb], null, ${traceHeaders})`)
        .catch((e: unknown) => e);
    expect(await call(`array[[repeat('x', 600)]]`)).toMatchObject({
      code: '22023',
      column_name: 'trace_headers',
    });
    expect(await call(`'[0:0]={"x"}'::text[]`)).toMatchObject({
      code: '22023',
      column_name: 'trace_headers',
    });
    expect(await count()).toBe(0);
  });

  it('refuses a max_entry_bytes above the 1048576 bytes EventBridge accepts', async () => {
    const error = await h.db.sql`
      select * from outbox_enqueue(event_type => 'T', source => 'shop.orders', aggregate_type => 'order',
        aggregate_id => '1', payload => '{}'::jsonb, max_entry_bytes => 2147483647)`.catch((e: unknown) => e);
    expect(error).toMatchObject({ code: '22023', column_name: 'max_entry_bytes' });
  });

  it('counts the entry as EventBridge does: an event just under the limit passes, one byte more does not', async () => {
    // Detail = {"metadata":{…},"data":<payload>}; sizing the payload to land exactly on the limit.
    const limit = 2_000;
    const fixed =
      14 + // Time
      'shop.orders'.length +
      'OrderPlaced'.length +
      '{"metadata":{"eventId":"00000000-0000-0000-0000-000000000000","aggregateType":"order","aggregateId":"1","sequence":9223372036854775807,"typeSequence":9223372036854775807,"occurredAt":"2000-01-01T00:00:00.000Z"},"data":}'
        .length;
    // Two-byte characters (é) fill the payload, one ASCII letter makes up an odd remainder.
    const payloadOf = (bytes: number) => {
      const n = bytes - '{"s":""}'.length;
      return JSON.stringify({ s: 'é'.repeat(Math.floor(n / 2)) + (n % 2 === 1 ? 'a' : '') });
    };
    const call = (payload: string) =>
      h.db.sql.begin(
        (tx) => tx`select * from outbox_enqueue(event_type => 'OrderPlaced', source => 'shop.orders',
          aggregate_type => 'order', aggregate_id => '1', payload => ${payload}::text::jsonb, max_entry_bytes => ${limit})`,
      );
    const fits = payloadOf(limit - fixed);
    expect(Buffer.byteLength(fits) + fixed).toBe(limit);
    await call(fits);
    const tooBig = payloadOf(limit - fixed + 1);
    expect(Buffer.byteLength(tooBig) + fixed).toBe(limit + 1);
    await expect(call(tooBig)).rejects.toMatchObject({ code: '22023', column_name: 'payload' });
    expect(await count()).toBe(1);
  });
});
