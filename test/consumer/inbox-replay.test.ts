/**
 * Replays from a Custom Event Bus (docs/consumer-operations.md#replays-from-the-custom-event-bus): a
 * subscriber with `Transformer: WITH_METADATA` hands the function `{ Data, SystemMetadata }`, and
 * a POINT_IN_TIME subscriber marks each delivery `aws:DeliveryType` = `REPLAY`. The inbox reads the
 * event out of `Data`, tells the handler and the metrics it was a replay, acknowledges an event
 * already applied as a duplicate (not an error), applies one never applied however old it is, and
 * refuses a malformed wrapper with a typed error, traced. RAW deliveries read as before.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { InboxEnvelopeError, type InboxOptions, inbox } from '../../shared/consumer/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 6 });
  await db.sql`create table applied (event_id text not null, sequence int not null, arrival text not null, replay boolean not null)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, applied`;
});

const DAY_MS = 86_400_000;

function outboxEvent(sequence: number, o: { eventId?: string; ageMs?: number } = {}) {
  const at = new Date(Date.now() - (o.ageMs ?? 0)).toISOString();
  return delivery({
    detailType: 'OrderChanged',
    metadata: { eventId: o.eventId ?? randomUUID(), aggregateId: 'o-1', sequence, occurredAt: at },
    time: at.replace(/\.\d{3}Z$/, 'Z'),
  }) as EventBridgeEvent<string, unknown>;
}

/** A WITH_METADATA delivery of `event`, as a Custom Event Bus subscriber hands it. */
const withMetadata = (event: EventBridgeEvent<string, unknown>, deliveryType: string, sequence = '1') => ({
  Data: event,
  SystemMetadata: {
    ContentType: 'application/eventbridge+json',
    'aws:EventId': randomUUID(),
    'aws:IngestionTime': event.time,
    'aws:SequenceNumber': sequence,
    'aws:DeliveryType': deliveryType,
    EventGroupId: 'order/o-1',
  },
});

function consumer(options: Partial<InboxOptions<Record<string, unknown>>> = {}) {
  const metrics: Record<string, unknown>[] = [];
  const seen: EventBridgeEvent<string, unknown>[] = [];
  const handler = inbox(
    {
      sql: db.sql,
      consumer: 'ledger',
      order: 'wait-for-gap',
      metrics: { write: (line) => metrics.push(JSON.parse(line)) },
      ...options,
    },
    async (event, { inbox: i }) => {
      seen.push(event);
      await i.tx`insert into applied values (${i.metadata.eventId}, ${Number(i.metadata.sequence)}, ${i.arrival}, ${i.replay})`;
      return { applied: i.metadata.eventId, replay: i.replay };
    },
  );
  const deliver = (event: Parameters<typeof handler>[0]) => handler(event, lambdaContext());
  const replays = () => metrics.filter((m) => 'InboxBusReplay' in m);
  return { deliver, seen, metrics, replays };
}

const applied = () =>
  db.sql<{ event_id: string; sequence: number; arrival: string; replay: boolean }[]>`
    select event_id, sequence, arrival, replay from applied order by sequence`;

describe('a Custom Event Bus WITH_METADATA delivery', () => {
  it('LIVE: applied from Data, the handler gets the EventBridge event, not a replay, nothing counted', async () => {
    const c = consumer();
    const e = outboxEvent(1);
    expect(await c.deliver(withMetadata(e, 'LIVE'))).toEqual({
      applied: (e.detail as { metadata: { eventId: string } }).metadata.eventId,
      replay: false,
    });
    expect(c.seen).toEqual([e]);
    expect((await applied()).map((r) => [r.sequence, r.arrival, r.replay])).toEqual([[1, 'next', false]]);
    expect(c.replays()).toEqual([]);
  });

  it('REPLAY of events already applied: duplicates, the handler not run, each counted with its outcome', async () => {
    const c = consumer();
    const events = [outboxEvent(1), outboxEvent(2)];
    for (const e of events) await c.deliver(e); // live, RAW (as from a rule)
    const ids = events.map((e) => (e.detail as { metadata: { eventId: string } }).metadata.eventId);
    const answers = [];
    for (const [i, e] of events.entries())
      answers.push(await c.deliver(withMetadata(e, 'REPLAY', String(i + 1))));
    expect(answers).toEqual(ids.map((eventId) => ({ inbox: 'duplicate', eventId, replay: true })));
    expect((await applied()).map((r) => r.replay)).toEqual([false, false]);
    expect(c.seen).toHaveLength(2);
    expect(
      c.replays().map((m) => [m.eventId, m.outcome, m.deliveryType, m.consumer, m.InboxBusReplay]),
    ).toEqual(ids.map((id) => [id, 'duplicate', 'REPLAY', 'ledger', 1]));
    // The inbox recorded nothing as failed: a replayed duplicate is not an error.
    expect(await db.sql`select * from inbox_failed`).toHaveLength(0);
  });

  it('REPLAY of a chain whose tail never arrived live: the applied ones duplicates, the rest applied in order, however old', async () => {
    const c = consumer();
    // 30 days old: older than the retry window (180 s), the maximum event age (6 h) and the gap wait.
    const events = [1, 2, 3, 4].map((n) => outboxEvent(n, { ageMs: 30 * DAY_MS }));
    for (const e of events.slice(0, 2)) await c.deliver(e);
    const outcomes = [];
    for (const [i, e] of events.entries()) {
      const answer = (await c.deliver(withMetadata(e, 'REPLAY', String(i + 1)))) as Record<string, unknown>;
      outcomes.push(answer.inbox ?? 'applied');
    }
    expect(outcomes).toEqual(['duplicate', 'duplicate', 'applied', 'applied']);
    expect((await applied()).map((r) => [r.sequence, r.arrival, r.replay])).toEqual([
      [1, 'next', false],
      [2, 'next', false],
      [3, 'next', true],
      [4, 'next', true],
    ]);
    expect(c.replays().map((m) => m.outcome)).toEqual(['duplicate', 'duplicate', 'next', 'next']);
    expect(await db.sql`select * from inbox_gap`).toHaveLength(0);
  });

  it('REPLAY of a parked event (never applied): stays parked, answered parked, never duplicate (issue 45, item 4)', async () => {
    const c = consumer({ onGapTimeout: 'park', gapWaitSeconds: 0 });
    const first = outboxEvent(1);
    const parkedEvent = outboxEvent(3);
    const events = [first, parkedEvent];
    for (const e of events) await c.deliver(e);
    const third = (parkedEvent.detail as { metadata: { eventId: string } }).metadata.eventId;
    const [parked] = await db.sql<
      { outcome: string }[]
    >`select outcome from inbox_message where event_id = ${third}`;
    expect(parked?.outcome).toBe('parked');
    const again = [await c.deliver(withMetadata(parkedEvent, 'REPLAY', '2')), await c.deliver(parkedEvent)];
    expect(again).toEqual([
      { inbox: 'parked', eventId: third, replay: true },
      { inbox: 'parked', eventId: third },
    ]);
    expect((await applied()).map((r) => r.sequence)).toEqual([1]);
    const [still] = await db.sql<{ outcome: string; event: unknown }[]>`
      select outcome, event from inbox_message where event_id = ${third}`;
    expect(still?.outcome).toBe('parked');
    expect(still?.event).toEqual(parkedEvent);
    expect(c.replays().map((m) => m.outcome)).toEqual(['parked']);
    // Counted once, when it was parked: a redelivery is no new parking.
    expect(c.metrics.filter((m) => 'InboxParked' in m)).toHaveLength(1);
  });

  it('a RAW delivery (no SystemMetadata) reads as before: not a replay', async () => {
    const c = consumer({ order: 'none' });
    expect(await c.deliver(outboxEvent(1))).toMatchObject({ replay: false });
    expect(c.replays()).toEqual([]);
  });

  it.each([
    [{ 'aws:DeliveryType': 'BACKFILL' }, 'SystemMetadata.aws:DeliveryType'],
    [{}, 'SystemMetadata.aws:DeliveryType'],
  ])(
    'refuses a wrapper whose SystemMetadata is %o with InboxEnvelopeError, traced in inbox_failed',
    async (system, field) => {
      const c = consumer();
      const e = outboxEvent(1);
      const error = await c.deliver({ Data: e, SystemMetadata: system }).catch((x: unknown) => x);
      expect(error).toBeInstanceOf(InboxEnvelopeError);
      expect((error as InboxEnvelopeError).field).toBe(field);
      const [trace] = await db.sql<{ event_id: string; error_name: string; event: unknown }[]>`
      select event_id, error_name, event from inbox_failed`;
      expect(trace?.event_id).toBe((e.detail as { metadata: { eventId: string } }).metadata.eventId);
      expect(trace?.error_name).toBe('InboxEnvelopeError');
      expect(trace?.event).toEqual(e);
      expect(await applied()).toHaveLength(0);
    },
  );

  it('refuses a wrapper without its event in Data', async () => {
    const c = consumer();
    const error = await c
      .deliver({ Data: 'x', SystemMetadata: { 'aws:DeliveryType': 'REPLAY' } } as never)
      .catch((x: unknown) => x);
    expect(error).toBeInstanceOf(InboxEnvelopeError);
    expect((error as InboxEnvelopeError).field).toBe('Data');
  });
});
