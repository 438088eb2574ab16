/**
 * typeSequence: each event's rank among its aggregate's events of the same type, numbered by the
 * producer under the same lock as its sequence and carried in the envelope, so that a consumer
 * whose rule delivers only some types can tell a gap from a type it never receives.
 */
import { describe, expect, it } from 'vitest';
import { connect } from '../../shared/platform/index.ts';
import { enqueue, enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness();

const event = (aggregateId: string, type: string, idempotencyKey?: string): OutboxEvent => ({
  type,
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId,
  payload: { type },
  ...(idempotencyKey ? { idempotencyKey } : {}),
});

/** Per aggregate and type, the sequences and typeSequences in sequence order. */
async function numbering() {
  const rows = await h.db.sql<
    { aggregate_id: string; event_type: string; sequence: string; type_sequence: string | null }[]
  >`
    select aggregate_id, event_type, sequence, type_sequence from outbox order by aggregate_id, sequence`;
  return rows.map((r) => `${r.aggregate_id} #${r.sequence} ${r.event_type} ${r.type_sequence ?? '-'}`);
}

describe('typeSequence', () => {
  it('numbers each type of an aggregate 1, 2, 3… within one call and across transactions', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [
        event('1', 'OrderPlaced'),
        event('2', 'OrderPlaced'),
        event('1', 'OrderPaid'),
        event('1', 'OrderPaid'),
      ]),
    );
    await h.db.sql.begin((tx) => enqueue(tx, event('1', 'OrderShipped')));
    await h.db.sql.begin((tx) => enqueueMany(tx, [event('1', 'OrderPaid'), event('2', 'OrderPaid')]));
    await h.db.sql`select * from outbox_enqueue(event_type => 'OrderPlaced', source => 'shop.orders',
      aggregate_type => 'order', aggregate_id => '1', payload => '{}'::jsonb)`;
    expect(await numbering()).toEqual([
      '1 #1 OrderPlaced 1',
      '1 #2 OrderPaid 1',
      '1 #3 OrderPaid 2',
      '1 #4 OrderShipped 1',
      '1 #5 OrderPaid 3',
      '1 #6 OrderPlaced 2',
      '2 #1 OrderPlaced 1',
      '2 #2 OrderPaid 1',
    ]);
    const [counts] = await h.db.sql<{ type_counts: Record<string, number> }[]>`
      select type_counts from outbox_aggregate where aggregate_id = '1'`;
    expect(counts?.type_counts).toEqual({ OrderPlaced: 2, OrderPaid: 3, OrderShipped: 1 });
  });

  it('spends no number on a duplicate idempotency key, nor on a rolled-back transaction', async () => {
    await h.db.sql.begin((tx) => enqueue(tx, event('1', 'OrderPaid', 'pay-1')));
    await h.db.sql.begin((tx) => enqueue(tx, event('1', 'OrderPaid', 'pay-1')));
    await h.db.sql
      .begin(async (tx) => {
        await enqueue(tx, event('1', 'OrderPaid'));
        throw new Error('rolled back');
      })
      .catch(() => undefined);
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [event('1', 'OrderPaid', 'pay-2'), event('1', 'OrderPaid', 'pay-2')]),
    );
    expect(await numbering()).toEqual(['1 #1 OrderPaid 1', '1 #2 OrderPaid 2']);
  });

  it('keeps each type contiguous under concurrent producers of one aggregate', async () => {
    const clients = Array.from({ length: 4 }, () => connect({ url: h.db.url, max: 1, env: {} }));
    try {
      const types = ['OrderPlaced', 'OrderPaid', 'OrderShipped'];
      await Promise.all(
        clients.map(async (sql, c) => {
          for (let i = 0; i < 30; i++) {
            await sql.begin((tx) =>
              enqueueMany(tx, [
                event('hot', types[(c + i) % 3] as string),
                event('hot', types[i % 3] as string),
              ]),
            );
          }
        }),
      );
    } finally {
      await Promise.all(clients.map((sql) => sql.end({ timeout: 5 })));
    }
    const rows = await h.db.sql<{ event_type: string; numbers: string[] }[]>`
      select event_type, array_agg(type_sequence order by sequence)::text[] as numbers
      from outbox group by event_type`;
    expect(rows.reduce((n, r) => n + r.numbers.length, 0)).toBe(240);
    for (const r of rows) {
      expect(r.numbers.map(Number)).toEqual(Array.from({ length: r.numbers.length }, (_, i) => i + 1));
    }
  });

  it('travels in the envelope; an event enqueued before migration 010 travels without it, and its aggregate starts each type at 1', async () => {
    // As a row and a counter written before migration 010 look.
    await h.db
      .sql`insert into outbox_aggregate (aggregate_type, aggregate_id, last_sequence) values ('order', 'old', 7)`;
    await h.db.sql`insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
                   values ('order', 'old', 7, 'OrderPaid', 'shop.orders', '{}')`;
    await h.db.sql.begin((tx) => enqueueMany(tx, [event('old', 'OrderPaid'), event('old', 'OrderShipped')]));
    await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings(),
      untilEmpty: true,
    });
    const sent = h.bus.events.map((e) => {
      const m = (e.detail as { metadata: { sequence: number; typeSequence?: number } }).metadata;
      return [e.detailType, m.sequence, m.typeSequence];
    });
    expect(sent).toEqual([
      ['OrderPaid', 7, undefined],
      ['OrderPaid', 8, 1],
      ['OrderShipped', 9, 1],
    ]);
  });
});
