/**
 * A Custom Event Bus subscriber's Lambda payload as an array (issue 46): the current User Guide
 * says MaxBatchSize 1 hands one object, the .cn mirror and AWS's code samples "a JSON array … even
 * when the batch holds one event". The inbox takes both shapes: an array of one or more RAW events
 * or WITH_METADATA deliveries, each recorded in the array's order, and refuses an empty array with
 * a typed error naming the field.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { InboxEnvelopeError, inbox } from '../../shared/consumer/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 6 });
  await db.sql`create table applied (n serial, event_id text not null, sequence int not null)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, applied`;
});

function outboxEvent(sequence: number, aggregateId = 'o-1') {
  return delivery({
    detailType: 'OrderChanged',
    metadata: { eventId: randomUUID(), aggregateId, sequence },
  }) as EventBridgeEvent<string, unknown>;
}

const withMetadata = (event: EventBridgeEvent<string, unknown>) => ({
  Data: event,
  SystemMetadata: { 'aws:DeliveryType': 'LIVE', EventGroupId: 'order/o-1' },
});

function ledger() {
  return inbox({ sql: db.sql, consumer: 'ledger', order: 'wait-for-gap' }, async (_e, { inbox: i }) => {
    await i.tx`insert into applied (event_id, sequence) values (${i.metadata.eventId}, ${Number(i.metadata.sequence)})`;
    return i.metadata.eventId;
  });
}
let handler: ReturnType<typeof ledger>;
beforeAll(() => {
  handler = ledger();
});

const applied = () =>
  db.sql<{ event_id: string; sequence: number }[]>`select event_id, sequence from applied order by n`;
const recorded = () => db.sql<{ count: number }[]>`select count(*)::int as count from inbox_message`;

describe('an EventsV2 Lambda delivery as an array', () => {
  it('one RAW event in an array: applied and recorded once, as the object is', async () => {
    const e = outboxEvent(1);
    const result = await handler([e] as never, lambdaContext());
    expect(result).toEqual([(e.detail as { metadata: { eventId: string } }).metadata.eventId]);
    expect(await applied()).toEqual([
      { event_id: (e.detail as { metadata: { eventId: string } }).metadata.eventId, sequence: 1 },
    ]);
    expect((await recorded())[0]?.count).toBe(1);
  });

  it('one WITH_METADATA delivery in an array: the event read out of Data', async () => {
    const e = outboxEvent(1);
    await handler([withMetadata(e)] as never, lambdaContext());
    expect((await applied()).map((r) => r.sequence)).toEqual([1]);
  });

  it('a batch of three: each applied, in the array order', async () => {
    const events = [outboxEvent(1), outboxEvent(2), outboxEvent(1, 'o-2')];
    await handler(events as never, lambdaContext());
    expect((await applied()).map((r) => r.event_id)).toEqual(
      events.map((e) => (e.detail as { metadata: { eventId: string } }).metadata.eventId),
    );
    expect((await recorded())[0]?.count).toBe(3);
  });

  it('still takes the single object', async () => {
    await handler(outboxEvent(1) as never, lambdaContext());
    expect((await applied()).map((r) => r.sequence)).toEqual([1]);
  });

  it('refuses an empty array with an InboxEnvelopeError naming the payload, nothing recorded', async () => {
    const error = await handler([] as never, lambdaContext()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InboxEnvelopeError);
    expect((error as InboxEnvelopeError).field).toBe('event');
    expect((await recorded())[0]?.count).toBe(0);
  });
});
