/**
 * sqsBatch: the inbox over a batch of SQS messages (OutboxConsumer's queue topology), against a
 * real database: each message in its own inbox transaction, only the failed ones reported.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { Context, EventBridgeEvent, SQSEvent, SQSRecord } from 'aws-lambda';
import postgres from 'postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { inbox, sqsBatch } from '../../shared/consumer/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 4 });
  await db.sql`create table applied (aggregate_id text not null, sequence int not null, at serial)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, applied`;
});

const eventFor = (sequence: number, aggregateId = 'o-1', data: Record<string, unknown> = {}) =>
  delivery({ metadata: { eventId: randomUUID(), aggregateId, sequence }, data });

/** An SQS message carrying `body` as an EventBridge rule's SQS target sends it. */
const message = (body: unknown): SQSRecord =>
  ({
    messageId: randomUUID(),
    receiptHandle: 'r',
    body: typeof body === 'string' ? body : JSON.stringify(body),
    attributes: {},
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:eu-west-1:123456789012:billing',
    awsRegion: 'eu-west-1',
  }) as SQSRecord;
const batch = (...records: SQSRecord[]): SQSEvent => ({ Records: records });

function batchHandler(order: 'none' | 'wait-for-gap' = 'none') {
  return sqsBatch(
    inbox(
      { sql: db.sql, consumer: 'billing', order, metrics: false },
      async (_event, { inbox: { tx, metadata, data } }) => {
        if ((data as { fail?: boolean }).fail) throw new Error('handler failed');
        await tx`insert into applied (aggregate_id, sequence) values (${metadata.aggregateId}, ${metadata.sequence})`;
        return 'applied';
      },
    ),
  );
}
const applied = () => db.sql<{ aggregate_id: string; sequence: number }[]>`
  select aggregate_id, sequence from applied order by at`;

describe('sqsBatch', () => {
  it('applies each message once and reports only the failed ones: an unparsable body, a failing handler', async () => {
    const good = message(eventFor(1, 'o-1'));
    const duplicate = message(JSON.parse(good.body));
    const notJson = message('{oops');
    const notAnEvent = message({ hello: 'world' });
    const failing = message(eventFor(1, 'o-2', { fail: true }));
    const other = message(eventFor(1, 'o-3'));
    const answer = await batchHandler()(
      batch(good, notJson, duplicate, failing, notAnEvent, other),
      lambdaContext(10_000),
    );
    expect(answer).toEqual({
      batchItemFailures: expect.arrayContaining(
        [notJson, notAnEvent, failing].map((m) => ({ itemIdentifier: m.messageId })),
      ),
    });
    expect((answer as { batchItemFailures: unknown[] }).batchItemFailures).toHaveLength(3);
    expect(await applied()).toEqual([
      { aggregate_id: 'o-1', sequence: 1 },
      { aggregate_id: 'o-3', sequence: 1 },
    ]);
  });

  it("runs a chain's events in one batch in their order, so wait-for-gap applies both at once", async () => {
    const second = message(eventFor(2, 'o-9'));
    const first = message(eventFor(1, 'o-9'));
    const started = Date.now();
    const answer = await batchHandler('wait-for-gap')(batch(second, first), lambdaContext(10_000));
    expect(answer).toEqual({ batchItemFailures: [] });
    expect(await applied()).toEqual([
      { aggregate_id: 'o-9', sequence: 1 },
      { aggregate_id: 'o-9', sequence: 2 },
    ]);
    // No in-invocation wait for the lower event (it would take half the time left, 5 s).
    expect(Date.now() - started).toBeLessThan(4_000);
  });

  it('an SQS FIFO queue: after a failed message, the later ones of its group are reported failed unrun; other groups go on', async () => {
    const fifo = (body: unknown, group: string): SQSRecord => {
      const m = message(body);
      return { ...m, attributes: { ...m.attributes, MessageGroupId: group } } as SQSRecord;
    };
    const a1 = fifo(eventFor(1, 'o-a', { fail: true }), 'order/o-a');
    const a2 = fifo(eventFor(2, 'o-a'), 'order/o-a');
    const b1 = fifo(eventFor(1, 'o-b'), 'order/o-b');
    const b2 = fifo(eventFor(2, 'o-b'), 'order/o-b');
    const answer = await batchHandler()(batch(a1, b1, a2, b2), lambdaContext(10_000));
    expect(answer).toEqual({
      batchItemFailures: [{ itemIdentifier: a1.messageId }, { itemIdentifier: a2.messageId }],
    });
    // o-a's #2 never ran (it comes back after #1); o-b's events were applied in order.
    expect(await applied()).toEqual([
      { aggregate_id: 'o-b', sequence: 1 },
      { aggregate_id: 'o-b', sequence: 2 },
    ]);
    // A standard queue's messages carry no group: a failure stops nothing else.
    const c1 = message(eventFor(1, 'o-c', { fail: true }));
    const c2 = message(eventFor(2, 'o-c'));
    expect(await batchHandler()(batch(c1, c2), lambdaContext(10_000))).toEqual({
      batchItemFailures: [{ itemIdentifier: c1.messageId }],
    });
  });

  it('passes a single EventBridge event through, as a replay invokes the function', async () => {
    const event = eventFor(1, 'o-5') as EventBridgeEvent<string, unknown>;
    expect(await batchHandler()(event, lambdaContext(10_000))).toBe('applied');
    expect(await applied()).toEqual([{ aggregate_id: 'o-5', sequence: 1 }]);
  });

  it('orders a batch by exact sequence, past 2^53 too (sequences travel as decimal strings there)', async () => {
    const seen: string[] = [];
    const handler = sqsBatch(async (event: EventBridgeEvent<string, unknown>) => {
      seen.push(String((event.detail as { metadata: { sequence: unknown } }).metadata.sequence));
    });
    const at = (sequence: string) => {
      const e = eventFor(1, 'o-big');
      (e.detail as { metadata: { sequence: unknown } }).metadata.sequence = sequence;
      return message(e);
    };
    // As doubles, 2^53 + 1 and 2^53 are both 9007199254740992: the sort would keep the queue order.
    await handler(
      batch(at('9007199254740995'), at('9007199254740993'), at('9007199254740992')),
      lambdaContext(10_000),
    );
    expect(seen).toEqual(['9007199254740992', '9007199254740993', '9007199254740995']);
  });

  it("passes middy's AbortSignal to the inbox: the trace is there when middy answers early, and no transaction is left open", async () => {
    // Issue 45, item 3: the shape examples/billing/handler.ts exports, a handler that outlives
    // middy's early timeout. Read from another connection, as an operator or the monitor would.
    const admin = postgres(db.url, { max: 2, onnotice: () => {} });
    try {
      const reader = await admin.reserve();
      let readAtAnswer: Promise<{ event_id: string }[]> | undefined;
      const event = eventFor(1, 'o-slow');
      const eventId = (event.detail as { metadata: { eventId: string } }).metadata.eventId;
      const handler = middy(
        sqsBatch(
          inbox({ sql: db.sql, consumer: 'billing', metrics: false }, async (_e, { inbox: { tx } }) => {
            await tx`select pg_sleep(6)`;
          }),
        ),
        {
          timeoutEarlyInMillis: 2_000,
          timeoutEarlyResponse: () => {
            readAtAnswer = reader<{ event_id: string }[]>`
              select event_id from inbox_failed where consumer = 'billing' and event_id = ${eventId}`.execute();
            return { ok: true };
          },
        },
      ) as unknown as (e: SQSEvent, c: Context) => Promise<unknown>;
      const answer = await handler(batch(message(event)), lambdaContext(4_000));
      expect(answer).toEqual({ ok: true });
      expect(await readAtAnswer).toEqual([{ event_id: eventId }]);
      reader.release();
      const open = () => admin`
        select 1 from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid()
          and (state like 'idle in transaction%' or (state = 'active' and query like '%pg_sleep%'))`;
      const end = Date.now() + 500;
      while ((await open()).length > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      expect(await open()).toHaveLength(0);
      expect(await applied()).toEqual([]);
    } finally {
      await admin.end({ timeout: 5 });
    }
  });
});
