/**
 * Nothing is acknowledged without a trace (issue 33, item 4), whatever wraps the inbox: a middy
 * chain whose early timeout answers for the handler, or whose `onError` turns the failure into a
 * success, still leaves the event in `inbox_failed`, durable before the answer leaves, and a later
 * delivery that commits removes it. Each trace is read from another connection, as an operator or
 * the monitor would read it.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { Context, EventBridgeEvent } from 'aws-lambda';
import postgres from 'postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery as eventBridgeDelivery } from '../../dev/delivery.ts';
import { type InboxContext, type InboxOptions, inbox } from '../../shared/consumer/index.ts';
import type { Sql } from '../../shared/platform/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
/** Another client: what it reads is what a frozen container left behind. */
let admin: Sql;
beforeAll(async () => {
  db = await createTestDatabase({ max: 4 });
  admin = postgres(db.url, { max: 2, onnotice: () => {} });
  await db.sql`create table effect (id text primary key, event_id text not null)`;
});
afterAll(async () => {
  await admin?.end({ timeout: 5 });
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, effect`;
});

/** Rejects when `promise` has not settled after `ms`: every wait in these tests has a deadline. */
async function within<T>(ms: number, promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still waiting after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `check` every 20 ms until it returns true, for at most `ms`. */
async function until(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what}: not true after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function delivery(eventId = randomUUID(), sequence = 1): EventBridgeEvent<string, unknown> {
  return eventBridgeDelivery({ metadata: { eventId, sequence } });
}

type Options = Partial<InboxOptions<Record<string, unknown>>>;
type Invoke = (event: EventBridgeEvent<string, unknown>, context: Context) => Promise<unknown>;

/** Writes the effect of an event: one row keyed by its event id. */
const applyEffect = (_e: unknown, ctx: InboxContext) =>
  ctx.inbox
    .tx`insert into effect (id, event_id) values (${ctx.inbox.metadata.eventId}, ${ctx.inbox.metadata.eventId})`;

const options = (o: Options = {}): InboxOptions<Record<string, unknown>> => ({
  sql: db.sql,
  consumer: 'billing',
  metrics: false,
  ...o,
});

/** The inbox in a middy chain whose `onError` answers for every failure, as a response shaper does. */
function swallowing(handler: (e: unknown, ctx: InboxContext) => Promise<unknown>, o: Options = {}): Invoke {
  return middy<EventBridgeEvent<string, unknown>, unknown>()
    .use({ onError: async () => ({ handled: true }) })
    .handler(inbox(options(o), handler)) as unknown as Invoke;
}

interface Trace {
  event_id: string;
  message_key: string | null;
  event: unknown;
  error_name: string;
  error_message: string;
  attempts: number;
}

const traceSelect = (eventId: string) =>
  admin<Trace[]>`
    select event_id, message_key, event, error_name, error_message, attempts
    from inbox_failed where consumer = 'billing' and event_id = ${eventId}`;

async function trace(eventId: string): Promise<Trace | undefined> {
  const [row] = await traceSelect(eventId);
  return row;
}

async function committed(eventId: string) {
  const [row] = await admin<{ effects: number; records: number }[]>`
    select (select count(*)::int from effect where event_id = ${eventId}) as effects,
           (select count(*)::int from inbox_message where event_id = ${eventId}) as records`;
  return row;
}

/** Sessions of the test database still inside a transaction, other than the reader's own. */
const openTransactions = () =>
  admin<{ state: string; query: string }[]>`
    select state, query from pg_stat_activity
    where datname = current_database() and pid <> pg_backend_pid()
      and (state like 'idle in transaction%' or (state = 'active' and query like '%pg_sleep%'))`;

describe("inbox: middy's early timeout cannot acknowledge an event without a trace", () => {
  it('the trace is durable before middy answers for the handler, and the transaction ends at once', async () => {
    // The reproduction: middy gives up 2 s before the Lambda deadline and answers success
    // while the handler still runs; the inbox's own deadline (500 ms before it) comes later.
    // A connection of its own, already open: the read is on the wire in the turn of the answer.
    const reader = await admin.reserve();
    let readAtAnswer: Promise<Trace[]> | undefined;
    const handler = middy(
      inbox(options(), async (_e, ctx: InboxContext) => {
        await applyEffect(_e, ctx);
        await ctx.inbox.tx`select pg_sleep(10)`;
      }),
      {
        timeoutEarlyInMillis: 2_000,
        timeoutEarlyResponse: () => {
          // Sent in the same turn as the abort, before the answer leaves: a trace written only after
          // the abort (once the rollback is done) would not be there for it to read.
          readAtAnswer = reader<Trace[]>`
          select event_id, message_key, event, error_name, error_message, attempts
          from inbox_failed where consumer = 'billing' and event_id = ${eventId}`.execute();
          return { ok: true };
        },
      },
    ) as unknown as Invoke;
    const eventId = randomUUID();
    const event = delivery(eventId);
    const answer = await within(5_000, handler(event, lambdaContext(3_000)), 'invocation');
    expect(answer).toEqual({ ok: true });

    const [atAnswer] = await within(5_000, Promise.resolve(readAtAnswer ?? []), 'read at answer');
    reader.release();
    expect(atAnswer).toMatchObject({ event_id: eventId, message_key: eventId, event });
    // The transaction does not outlive the answer: cancelled and rolled back on the abort, not at
    // the inbox's deadline 1.5 s later (a frozen container would keep it open).
    await until(async () => (await openTransactions()).length === 0, 500, 'no transaction open');
    expect(await committed(eventId)).toEqual({ effects: 0, records: 0 });
    // Once the rollback is done the trace says why.
    await until(
      async () => (await trace(eventId))?.error_name === 'InboxAbortedError',
      1_000,
      'the trace names the abort',
    );
    expect((await trace(eventId))?.error_message).toMatch(/abort/i);

    // The retry is not blocked by a leftover transaction; it applies the event and clears the trace.
    const retry = inbox(options(), applyEffect);
    await within(2_000, retry(delivery(eventId), lambdaContext(10_000)), 'retry');
    expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
    expect(await trace(eventId)).toBeUndefined();
  });

  it('leaves no trace of an invocation under middy that commits', async () => {
    const handler = middy(inbox(options(), applyEffect), {
      timeoutEarlyInMillis: 2_000,
      timeoutEarlyResponse: () => ({ ok: true }),
    }) as unknown as Invoke;
    const eventId = randomUUID();
    await within(5_000, handler(delivery(eventId), lambdaContext(10_000)), 'invocation');
    expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
    expect(await trace(eventId)).toBeUndefined();
    // A duplicate, acknowledged without the handler, leaves none either.
    expect(await within(5_000, handler(delivery(eventId), lambdaContext(10_000)), 'duplicate')).toEqual({
      inbox: 'duplicate',
      eventId,
    });
    expect(await trace(eventId)).toBeUndefined();
  });
});

describe('inbox: an onError that returns a value cannot acknowledge an event without a trace', () => {
  it('keeps a wait-for-gap event (#3 before #2) that onError answered for, until a delivery applies it', async () => {
    const o: Options = { order: 'wait-for-gap' };
    const c = swallowing(applyEffect, o);
    const first = randomUUID();
    await within(5_000, c(delivery(first, 1), lambdaContext(10_000)), '#1');
    const third = randomUUID();
    const event = delivery(third, 3);
    expect(await within(5_000, c(event, lambdaContext(10_000)), '#3')).toEqual({ handled: true });
    expect(await trace(third)).toMatchObject({
      event_id: third,
      message_key: third,
      event,
      error_name: 'InboxGapError',
      attempts: 1,
    });
    expect((await trace(third))?.error_message).toMatch(/#3 .* but #2 was not applied/);
    // Lambda's retry of #3 fails again: one trace, two attempts.
    expect(await within(5_000, c(delivery(third, 3), lambdaContext(10_000)), '#3 again')).toEqual({
      handled: true,
    });
    expect(await trace(third)).toMatchObject({ attempts: 2, error_name: 'InboxGapError' });

    // #2 arrives; #3's next delivery is applied, and its trace goes in the same transaction.
    await within(5_000, c(delivery(randomUUID(), 2), lambdaContext(10_000)), '#2');
    await within(5_000, c(delivery(third, 3), lambdaContext(10_000)), '#3 applied');
    expect(await committed(third)).toEqual({ effects: 1, records: 1 });
    expect(await trace(third)).toBeUndefined();
  });

  it('keeps an event whose handler failed and onError answered for, until a delivery applies it', async () => {
    let fail = true;
    const c = swallowing(async (e, ctx) => {
      await applyEffect(e, ctx);
      if (fail) throw new TypeError('the invoice service is down');
    });
    const eventId = randomUUID();
    const event = delivery(eventId);
    expect(await within(5_000, c(event, lambdaContext(10_000)), 'failing')).toEqual({ handled: true });
    expect(await committed(eventId)).toEqual({ effects: 0, records: 0 });
    expect(await trace(eventId)).toMatchObject({
      event,
      error_name: 'TypeError',
      error_message: 'the invoice service is down',
      attempts: 1,
    });

    fail = false;
    await within(5_000, c(delivery(eventId), lambdaContext(10_000)), 'succeeding');
    expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
    expect(await trace(eventId)).toBeUndefined();
  });

  it('keeps an event whose transaction could not commit, and one whose envelope is malformed', async () => {
    // The handler swallows a failed statement: the COMMIT would not commit (InboxCommitError).
    const c = swallowing(async (e, ctx) => {
      await applyEffect(e, ctx);
      await applyEffect(e, ctx).catch(() => undefined);
    });
    const eventId = randomUUID();
    expect(await within(5_000, c(delivery(eventId), lambdaContext(10_000)), 'invocation')).toEqual({
      handled: true,
    });
    expect(await trace(eventId)).toMatchObject({ error_name: 'InboxCommitError' });

    // A sequence of 0: InboxEnvelopeError before anything is recorded, but still traced.
    const malformed = randomUUID();
    const bad = delivery(malformed, 0);
    expect(await within(5_000, c(bad, lambdaContext(10_000)), 'malformed')).toEqual({ handled: true });
    expect(await trace(malformed)).toMatchObject({
      message_key: null,
      event: bad,
      error_name: 'InboxEnvelopeError',
    });
  });
});

describe('a business key: the fact applied by one route clears the failure traces of the others', () => {
  it("removes route 1's trace when route 2's event of the same key commits", async () => {
    // The same payment by two routes, two event ids, one key: route 1's event fails every attempt.
    const keyed = (fail: boolean) =>
      inbox(options({ key: ({ data }) => `pay:${String(data.paymentId)}` }), async (_e, ctx) => {
        if (fail) throw new Error('the ledger is down');
        await applyEffect(_e, ctx);
      });
    const route = (eventId: string) =>
      eventBridgeDelivery({ metadata: { eventId, sequence: 1 }, data: { paymentId: 'P-1' } });
    const [one, two] = [randomUUID(), randomUUID()];
    for (let attempt = 0; attempt < 3; attempt++) {
      await expect(keyed(true)(route(one), lambdaContext(10_000))).rejects.toThrow(/ledger is down/);
    }
    expect(await admin`select event_id, message_key from inbox_failed`).toEqual([
      { event_id: one, message_key: 'pay:P-1' },
    ]);
    await keyed(false)(route(two), lambdaContext(10_000));
    // The fact is recorded (route 2's event): route 1's trace would count an applied payment as failed.
    expect(await admin`select message_key, event_id from inbox_message`).toEqual([
      { message_key: 'pay:P-1', event_id: two },
    ]);
    expect(await admin`select * from inbox_failed`).toEqual([]);
  });
});
