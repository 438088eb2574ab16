/**
 * Issue 45, item 6, end to end: two outbox databases publish `order/8842` #1–#3 each to one bus; the
 * relay names each event's outbox (`metadata.outboxId`, migration 031's `outbox.outbox_identity`)
 * on the classic bus and on the Custom Event Bus, and one inbox consumer keeps two chains: nothing
 * stale. The id is left out of an entry it would take past the size limit (enqueue's size check
 * does not count it).
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { inbox } from '../../shared/consumer/index.ts';
import { type AcceptedEvent, type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { entrySize } from '../../shared/platform/index.ts';
import { enqueueMany } from '../../shared/producer/index.ts';
import { toEntry } from '../../shared/relay/buses/classic-bus.ts';
import {
  createEventsV2Client,
  eventsV2Publisher,
  toEventsV2Entry,
} from '../../shared/relay/buses/custom-event-bus.ts';
import { runRelay } from '../../shared/relay/index.ts';
import type { ClaimedEvent } from '../../shared/relay/types.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';
import { testClient, testSettings } from '../support/relay.ts';

let shop: TestDatabase;
let legacy: TestDatabase;
let bus: LocalBus;
beforeAll(async () => {
  [shop, legacy] = await Promise.all([createTestDatabase({ max: 4 }), createTestDatabase({ max: 4 })]);
  bus = await startLocalBus();
  await shop.sql`create table applied (n serial primary key, outbox text, sequence int, arrival text)`;
});
afterAll(async () => {
  await shop?.drop();
  await legacy?.drop();
  await bus?.close();
});
beforeEach(() => bus.reset());

const idOf = async (db: TestDatabase) =>
  (await db.sql<{ id: string }[]>`select outbox_id::text as id from outbox.outbox_identity`)[0]?.id;

const enqueueOrder = (db: TestDatabase, source: string) =>
  db.sql.begin((tx) =>
    enqueueMany(
      tx,
      [1, 2, 3].map(() => ({
        type: 'OrderChanged',
        source,
        aggregateType: 'order',
        aggregateId: '8842',
        payload: {},
      })),
    ),
  );

/** The event a rule hands its Lambda target, from what the bus accepted. */
const asDelivered = (e: AcceptedEvent): EventBridgeEvent<string, unknown> => ({
  version: '0',
  id: e.id,
  'detail-type': e.detailType,
  source: e.source,
  account: '123456789012',
  time: e.time ?? new Date().toISOString(),
  region: 'eu-west-1',
  resources: [],
  detail: e.detail,
});

const metadataOf = (e: AcceptedEvent) => e.detail.metadata as { outboxId?: string; sequence: number };

describe('the outbox id on the bus', () => {
  it('two outboxes, classic bus, one inbox consumer: each event names its outbox, two chains, nothing stale', async () => {
    const ids = { shop: await idOf(shop), legacy: await idOf(legacy) };
    expect(ids.shop).toMatch(/^[0-9a-f-]{36}$/);
    expect(ids.legacy, 'each outbox database draws its own id').not.toBe(ids.shop);
    await enqueueOrder(shop, 'shop.orders');
    await enqueueOrder(legacy, 'legacy.orders');
    for (const db of [shop, legacy]) {
      await runRelay({
        sql: db.sql,
        client: testClient(bus.url),
        settings: testSettings({ eventBusName: 'orders' }),
        untilEmpty: true,
      });
    }
    expect(bus.events.map((e) => `${e.source} #${metadataOf(e).sequence} ${metadataOf(e).outboxId}`)).toEqual(
      [
        `shop.orders #1 ${ids.shop}`,
        `shop.orders #2 ${ids.shop}`,
        `shop.orders #3 ${ids.shop}`,
        `legacy.orders #1 ${ids.legacy}`,
        `legacy.orders #2 ${ids.legacy}`,
        `legacy.orders #3 ${ids.legacy}`,
      ],
    );

    const handler = inbox(
      { sql: shop.sql, consumer: 'billing', order: 'ignore-stale', metrics: false },
      async (event, { inbox: i }) => {
        await i.tx`insert into applied (outbox, sequence, arrival)
          values (${event.source}, ${Number(i.metadata.sequence)}, ${i.arrival})`;
      },
    );
    const answers: unknown[] = [];
    for (const e of bus.events) answers.push(await handler(asDelivered(e) as never, lambdaContext()));
    expect(answers, 'none answered stale').toEqual(Array(6).fill(undefined));
    const applied = await shop.sql<{ outbox: string; sequence: number; arrival: string }[]>`
      select outbox, sequence, arrival from applied order by n`;
    expect(applied.map((a) => `${a.outbox} #${a.sequence} ${a.arrival}`)).toEqual([
      'shop.orders #1 next',
      'shop.orders #2 next',
      'shop.orders #3 next',
      'legacy.orders #1 next',
      'legacy.orders #2 next',
      'legacy.orders #3 next',
    ]);
  });

  it('the Custom Event Bus: each event names its outbox', async () => {
    const ARN = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc123';
    const settings = testSettings({ eventBusName: ARN, eventBusArn: ARN });
    await enqueueOrder(legacy, 'legacy.orders');
    const client = createEventsV2Client({
      endpoint: bus.url,
      region: 'eu-west-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    });
    await runRelay({
      sql: legacy.sql,
      publisher: eventsV2Publisher(client, settings),
      settings,
      untilEmpty: true,
    });
    expect(bus.events).toHaveLength(3);
    expect(new Set(bus.events.map((e) => metadataOf(e).outboxId))).toEqual(new Set([await idOf(legacy)]));
  });

  it('a database without the id (migration 031 not run yet) is still relayed: its events name no outbox', async () => {
    const bare = await createTestDatabase({ max: 2 });
    try {
      await bare.sql`drop table outbox.outbox_identity`;
      await enqueueOrder(bare, 'shop.orders');
      const run = await runRelay({
        sql: bare.sql,
        client: testClient(bus.url),
        settings: testSettings({ eventBusName: 'orders' }),
        untilEmpty: true,
      });
      expect(run.published).toBe(3);
      expect(bus.events.map((e) => metadataOf(e).outboxId)).toEqual([undefined, undefined, undefined]);
    } finally {
      await bare.drop();
    }
  });

  it('an entry the id would take past the size limit goes without it, on both buses', () => {
    const event: ClaimedEvent = {
      id: '1',
      eventId: randomUUID(),
      aggregateType: 'order',
      aggregateId: '8842',
      sequence: '1',
      type: 'OrderChanged',
      source: 'shop.orders',
      payloadJson: `{"note":"${'x'.repeat(1000)}"}`,
      traceHeader: null,
      createdAt: new Date(),
      attempts: 1,
      isHead: true,
      outboxId: randomUUID(),
    };
    const bare = entrySize(toEntry({ ...event, outboxId: undefined }, 'orders'));
    const named = entrySize(toEntry(event, 'orders'));
    expect(named - bare, '"outboxId":"<uuid>" and its comma').toBe(50);
    for (const [limit, carries] of [
      [named, true],
      [named - 1, false],
    ] as const) {
      const classic = toEntry(event, 'orders', limit);
      const v2 = toEventsV2Entry(event, limit);
      for (const entry of [classic, v2]) {
        expect(entrySize(entry)).toBeLessThanOrEqual(limit);
        expect(
          (JSON.parse(entry.Detail as string) as { metadata: { outboxId?: string } }).metadata.outboxId,
        ).toBe(carries ? event.outboxId : undefined);
      }
    }
  });
});
