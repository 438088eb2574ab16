/**
 * Two outboxes, one consumer (issue 45, item 6): each outbox database numbers its aggregates'
 * events on its own counter, so `order/8842` #1–#3 of outbox `shop` and #1–#3 of outbox `legacy`
 * are two chains. The relay names its outbox in `metadata.outboxId`; the inbox keys a chain by it.
 * Run in every order mode, with and without `types`: nothing of either outbox is stale, parked or
 * waiting while nothing of its own is missing, and each outbox's order is kept on its own.
 *
 * The upgrade: a chain the inbox kept before (no outbox named) is continued by the first outbox
 * whose named events arrive (adopted in place, `inbox_aggregate.outbox_id`), and events without an
 * `outboxId` (a previous release's relay) keep using that chain (docs/inbox-order.md#two-outboxes-one-consumer).
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { type InboxOptions, inbox } from '../../shared/consumer/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 6 });
  await db.sql`create table applied (n serial primary key, consumer text not null, outbox text,
    sequence int not null, arrival text not null)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, applied`;
});

const SHOP = randomUUID();
const LEGACY = randomUUID();
const TYPES = ['OrderPlaced', 'OrderPaid'];

/** Every order mode, and the `types` chains of the two that keep order. */
const MODES: { name: string; options: Partial<InboxOptions<Record<string, unknown>>> }[] = [
  { name: 'none', options: { order: 'none' } },
  { name: 'ignore-stale', options: { order: 'ignore-stale' } },
  { name: 'wait-for-gap, process', options: { order: 'wait-for-gap', onGapTimeout: 'process' } },
  { name: 'wait-for-gap, park', options: { order: 'wait-for-gap', onGapTimeout: 'park' } },
  { name: 'ignore-stale, types', options: { order: 'ignore-stale', types: TYPES } },
  {
    name: 'wait-for-gap, process, types',
    options: { order: 'wait-for-gap', onGapTimeout: 'process', types: TYPES },
  },
  {
    name: 'wait-for-gap, park, types',
    options: { order: 'wait-for-gap', onGapTimeout: 'park', types: TYPES },
  },
];

/**
 * Event #`sequence` of `order/8842` as outbox `outboxId` numbers it (undefined: a relay of a
 * previous release, which names no outbox). OrderPlaced and OrderPaid in turn, with their ranks.
 */
function outboxEvent(
  outboxId: string | undefined,
  sequence: number,
  aggregateId = '8842',
): EventBridgeEvent<string, unknown> {
  const type = TYPES[(sequence - 1) % 2] as string;
  return delivery({
    detailType: type,
    source: outboxId === LEGACY ? 'legacy.orders' : 'shop.orders',
    metadata: {
      eventId: randomUUID(),
      aggregateId,
      sequence,
      typeSequence: Math.ceil(sequence / 2),
      ...(outboxId === undefined ? {} : { outboxId }),
    },
  }) as EventBridgeEvent<string, unknown>;
}

const nameOf = (outboxId: string | undefined) =>
  outboxId === SHOP ? 'shop' : outboxId === LEGACY ? 'legacy' : 'unnamed';

function consumer(name: string, options: Partial<InboxOptions<Record<string, unknown>>>) {
  const handler = inbox(
    { sql: db.sql, consumer: name, metrics: false, gapWaitSeconds: 120, ...options },
    async (_event, { inbox: i }) => {
      const outboxId = (i.metadata as { outboxId?: string }).outboxId;
      await i.tx`insert into applied (consumer, outbox, sequence, arrival)
        values (${name}, ${nameOf(outboxId)}, ${Number(i.metadata.sequence)}, ${i.arrival})`;
      return i.arrival;
    },
  );
  return (event: EventBridgeEvent<string, unknown>): Promise<string> =>
    handler({ ...event, id: randomUUID() } as never, lambdaContext(10_000)).then(
      (r) => (typeof r === 'string' ? r : (r as { inbox: string }).inbox),
      (e: Error) => e.name,
    );
}

const appliedOf = async (name: string) =>
  (
    await db.sql<{ outbox: string; sequence: number }[]>`
      select outbox, sequence from applied where consumer = ${name} order by n`
  ).map((a) => `${a.outbox} #${a.sequence}`);

const outcomesOf = async (name: string) =>
  (
    await db.sql<{ outcome: string }[]>`
      select outcome from inbox_message where consumer = ${name} group by outcome order by outcome`
  ).map((r) => r.outcome);

/** What an event applied in its turn answers in this mode. */
const inTurn = (mode: (typeof MODES)[number]) => (mode.options.order === 'none' ? 'unordered' : 'next');

describe('two outboxes publishing order/8842 to one consumer: two chains', () => {
  for (const mode of MODES) {
    it(`${mode.name}: shop #1–#3, then legacy #1–#3, then both interleaved: every event in its turn`, async () => {
      const name = `two-${mode.name.replace(/[^a-z]+/g, '-')}`;
      const deliver = consumer(name, mode.options);
      const answers: string[] = [];
      const run = async (outboxId: string, sequence: number) =>
        answers.push(`${nameOf(outboxId)} #${sequence}: ${await deliver(outboxEvent(outboxId, sequence))}`);
      for (const n of [1, 2, 3]) await run(SHOP, n);
      for (const n of [1, 2, 3]) await run(LEGACY, n);
      for (const n of [4, 5]) {
        await run(LEGACY, n);
        await run(SHOP, n);
      }
      const order = [
        'shop',
        'shop',
        'shop',
        'legacy',
        'legacy',
        'legacy',
        'legacy',
        'shop',
        'legacy',
        'shop',
      ];
      const numbers = [1, 2, 3, 1, 2, 3, 4, 4, 5, 5];
      const expected = order.map((o, i) => `${o} #${numbers[i]}: ${inTurn(mode)}`);
      expect(answers).toEqual(expected);
      expect(await appliedOf(name)).toEqual(order.map((o, i) => `${o} #${numbers[i]}`));
      expect(await outcomesOf(name), 'nothing stale, nothing parked').toEqual(['processed']);
      expect(await db.sql`select message_key from inbox_gap`, 'nothing waits for a gap').toEqual([]);
    });
  }

  for (const mode of MODES.filter((m) => m.options.order !== 'none')) {
    it(`${mode.name}: each outbox's order is kept on its own (legacy #3 before its #2 is not taken as shop's)`, async () => {
      const name = `own-${mode.name.replace(/[^a-z]+/g, '-')}`;
      const deliver = consumer(name, mode.options);
      for (const n of [1, 2, 3, 4]) expect(await deliver(outboxEvent(SHOP, n))).toBe('next');
      expect(await deliver(outboxEvent(LEGACY, 1))).toBe('next');
      // legacy #3 arrives before legacy #2 (with types: OrderPlaced #2 of its type before OrderPaid #1
      // of its, so the type chains see #3 as next of OrderPlaced: only #5 shows the gap there).
      const skip = mode.options.types ? 5 : 3;
      const early = outboxEvent(LEGACY, skip);
      const answer = await deliver(early);
      if (mode.options.order === 'ignore-stale') expect(answer).toBe('ahead');
      else expect(answer).toBe('InboxGapError');
      expect(await appliedOf(name)).toEqual([
        'shop #1',
        'shop #2',
        'shop #3',
        'shop #4',
        'legacy #1',
        ...(answer === 'ahead' ? [`legacy #${skip}`] : []),
      ]);
    });
  }
});

describe('the upgrade: chains the inbox kept before outboxes were named', () => {
  for (const mode of MODES.filter((m) => m.options.order !== 'none')) {
    it(`${mode.name}: the first named outbox adopts the chain in place; events without an outboxId keep to it; the other outbox gets its own`, async () => {
      const name = `adopt-${mode.name.replace(/[^a-z]+/g, '-')}`;
      const deliver = consumer(name, mode.options);
      const answers: string[] = [];
      const run = async (outboxId: string | undefined, sequence: number) =>
        answers.push(`${nameOf(outboxId)} #${sequence}: ${await deliver(outboxEvent(outboxId, sequence))}`);
      // A previous release's relay: #1–#3 without an outboxId.
      for (const n of [1, 2, 3]) await run(undefined, n);
      // shop's relay upgraded: #4, #5 name it; a straggler of the previous relay (#6) in between.
      await run(SHOP, 4);
      await run(undefined, 5);
      await run(SHOP, 6);
      // legacy's events: a chain of their own.
      for (const n of [1, 2]) await run(LEGACY, n);
      await run(SHOP, 7);
      const turns = ['unnamed #1', 'unnamed #2', 'unnamed #3', 'shop #4', 'unnamed #5', 'shop #6'];
      const expected = [...turns, 'legacy #1', 'legacy #2', 'shop #7'].map((t) => `${t}: next`);
      expect(answers).toEqual(expected);
      expect(await outcomesOf(name), 'nothing stale, nothing parked').toEqual(['processed']);
      // A redelivery of an event applied before the upgrade, now named by shop's relay: applied once.
      const again = outboxEvent(SHOP, 3);
      const [{ event_id } = { event_id: '' }] = await db.sql<{ event_id: string }[]>`
        select event_id from inbox_message where consumer = ${name} and sequence = 3 and source = 'shop.orders'`;
      (again.detail as { metadata: { eventId: string } }).metadata.eventId = event_id;
      expect(await deliver(again)).toBe('duplicate');
      const rows = await db.sql<{ chain: string; outbox_id: string | null; last_sequence: string }[]>`
        select chain, outbox_id::text, last_sequence::text from inbox_aggregate
        where consumer = ${name} and source = '' order by last_sequence desc`;
      const chains = mode.options.types ? 4 : 2;
      expect(rows, 'one chain row per outbox (per type with types)').toHaveLength(chains);
      expect(rows.filter((r) => r.outbox_id === SHOP)).toHaveLength(chains / 2);
      expect(rows.filter((r) => r.outbox_id === LEGACY)).toHaveLength(chains / 2);
    });
  }
});

describe('parkAfterAttempts', () => {
  it("an event parked after its handler failed holds its own outbox's later events of the aggregate, not the other outbox's", async () => {
    const failing = new Set<string>();
    const handler = inbox(
      { sql: db.sql, consumer: 'held', order: 'ignore-stale', parkAfterAttempts: 1, metrics: false },
      async (_event, { inbox: i }) => {
        if (failing.has(i.metadata.eventId)) throw new Error('the handler failed (injected)');
        const outboxId = (i.metadata as { outboxId?: string }).outboxId;
        await i.tx`insert into applied (consumer, outbox, sequence, arrival)
          values ('held', ${nameOf(outboxId)}, ${Number(i.metadata.sequence)}, ${i.arrival})`;
        return i.arrival;
      },
    );
    const deliver = (event: EventBridgeEvent<string, unknown>) =>
      handler({ ...event, id: randomUUID() } as never, lambdaContext(10_000)).then(
        (r) => (typeof r === 'string' ? r : (r as { inbox: string }).inbox),
        (e: Error) => e.name,
      );
    const poison = outboxEvent(SHOP, 1);
    failing.add((poison.detail as { metadata: { eventId: string } }).metadata.eventId);
    const answers = [
      await deliver(poison),
      await deliver(outboxEvent(SHOP, 2)),
      await deliver(outboxEvent(LEGACY, 1)),
      await deliver(outboxEvent(LEGACY, 2)),
    ];
    expect(answers).toEqual(['parked', 'parked', 'next', 'next']);
    expect(await appliedOf('held')).toEqual(['legacy #1', 'legacy #2']);
  });
});

describe('the outboxId field', () => {
  it('is a uuid, else a typed error naming the field (nothing recorded); its case does not split a chain', async () => {
    const deliver = consumer('field', { order: 'ignore-stale' });
    const bad = outboxEvent(SHOP, 1);
    (bad.detail as { metadata: { outboxId: unknown } }).metadata.outboxId = 'shop';
    expect(await deliver(bad)).toBe('InboxEnvelopeError');
    expect(await db.sql`select 1 from inbox_message where consumer = 'field'`).toHaveLength(0);
    const upper = outboxEvent(SHOP, 1);
    (upper.detail as { metadata: { outboxId: string } }).metadata.outboxId = SHOP.toUpperCase();
    expect([await deliver(upper), await deliver(outboxEvent(SHOP, 2))]).toEqual(['next', 'next']);
  });
});
