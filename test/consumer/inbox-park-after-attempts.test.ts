/**
 * `parkAfterAttempts` (issue 46, item 2; docs/buses.md#a-failing-event-on-a-custom-event-bus): on
 * the worst reading of the Custom Event Bus's retry page, a FIFO subscriber's failed call holds up
 * every group of the subscriber. The inbox bounds that: after that many failed handler calls it
 * parks the event, acknowledges it, and parks the aggregate's later events behind it, in order,
 * until `outbox inbox parked replay` applies them in order.
 *
 * Real parts: the relay's EventsV2 client puts the events on the local bus over HTTP, the local
 * FIFO subscriber with `holdUp: 'all'` calls the inbox-wrapped handler, Postgres records; the
 * replay is the CLI, invoking the function through the local Lambda over HTTP.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { InboxOptionsError, inbox } from '../../shared/consumer/index.ts';
import { markParkedForReplay } from '../../shared/consumer/operations/index.ts';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { type LocalLambda, startLocalLambda } from '../../shared/local/lambda.ts';
import { type LocalSubscriber, startSubscriber } from '../../shared/local/subscriber.ts';
import { EnvVar } from '../../shared/platform/index.ts';
import {
  EventsV2Client,
  EventsV2PutEventsCommand,
  type EventsV2PutEventsRequestEntry,
} from '../../shared/relay/buses/custom-event-bus-client.ts';
import { OUTBOX_BIN, runCli } from '../support/cli.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

const ARN = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc123';
const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };
/** The subscriber's delay before each retry, ms. */
const RETRY_DELAY_MS = 100;
/** Without parkAfterAttempts: the subscriber's retries of the poison event before its dead letter. */
const MAX_RETRIES = 15;

let db: TestDatabase;
let bus: LocalBus;
let client: EventsV2Client;
let lambda: LocalLambda;
let poisonFixed = false;
const subscribers: LocalSubscriber[] = [];
/** When each event was applied (ms since the epoch), by `<aggregate>#<sequence>`. */
const appliedAt = new Map<string, number>();

function billing(consumer: string, parkAfterAttempts: number | undefined) {
  return inbox(
    {
      sql: db.sql,
      consumer,
      order: 'wait-for-gap',
      gapWaitSeconds: 0,
      parkAfterAttempts,
      metrics: false,
    },
    async (_event, { inbox: i }) => {
      if (i.data.poison && !poisonFixed) throw new Error(`cannot invoice ${i.metadata.aggregateId}: poison`);
      const label = `${i.metadata.aggregateId}#${i.metadata.sequence}`;
      await i.tx`insert into effect values (${consumer}, ${label}, ${i.arrival})`;
      appliedAt.set(`${consumer} ${label}`, Date.now());
      return { applied: label };
    },
  );
}

beforeAll(async () => {
  db = await createTestDatabase({ max: 6 });
  await db.sql`create table effect (consumer text not null, label text not null, arrival text not null)`;
  bus = await startLocalBus({ seed: 11 });
  client = new EventsV2Client({ region: 'eu-west-1', credentials, endpoint: bus.url, maxAttempts: 1 });
  const parking = billing('billing', 3);
  lambda = await startLocalLambda({
    onInvoke: (invocation) =>
      parking(invocation.payload as EventBridgeEvent<string, unknown>, lambdaContext(30_000)),
    functions: { 'billing-fn': { environment: { [EnvVar.inboxConsumer]: 'billing' } } },
  });
});
afterAll(async () => {
  await Promise.all(subscribers.map((s) => s.close()));
  client?.destroy();
  await lambda?.close();
  await bus?.close();
  await db?.drop();
});
beforeEach(async () => {
  await Promise.all(subscribers.splice(0).map((s) => s.close()));
  bus.reset();
  poisonFixed = false;
  appliedAt.clear();
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, effect`;
});

/** An outbox event of aggregate `id` as a PutEvents entry, grouped by its aggregate as the relay does. */
function entry(
  id: string,
  sequence: number,
  data: Record<string, unknown> = {},
): EventsV2PutEventsRequestEntry {
  const e = delivery({ detailType: 'OrderChanged', metadata: { aggregateId: id, sequence }, data });
  return {
    Source: e.source,
    DetailType: e['detail-type'],
    Detail: JSON.stringify(e.detail),
    SystemMetadata: { EventGroupId: `order/${id}`, DeduplicationId: e.detail.metadata.eventId },
  };
}

async function put(...entries: EventsV2PutEventsRequestEntry[]) {
  const out = await client.send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: entries }));
  expect(out.FailedEntryCount).toBe(0);
}

/** o-1's #2 is the poison, published first; o-2 and o-3 are healthy, published after its first failure. */
const poisonFirst = () => [entry('o-1', 1), entry('o-1', 2, { poison: true })];
const traffic = () => [
  entry('o-2', 1),
  entry('o-3', 1),
  entry('o-2', 2),
  entry('o-3', 2),
  entry('o-1', 3),
  entry('o-2', 3),
  entry('o-3', 3),
  entry('o-1', 4),
  entry('o-1', 5),
];

/** Runs the traffic through a FIFO subscriber that holds up every group on a failure. */
async function run(consumer: string, parkAfterAttempts: number | undefined) {
  const handler = billing(consumer, parkAfterAttempts);
  const subscriber = startSubscriber({
    bus,
    eventBusArn: ARN,
    type: 'FIFO',
    holdUp: 'all',
    target: (event) => handler(event as EventBridgeEvent<string, unknown>, lambdaContext(10_000)),
    retryPolicy: { maxRetryAttempts: MAX_RETRIES, maxEventAgeSeconds: 3600 },
    retryDelayMs: () => RETRY_DELAY_MS,
    name: consumer,
  });
  subscribers.push(subscriber);
  const before = bus.events.length;
  // The healthy events go to the bus once the poison's first call has failed: put together, the
  // subscriber could deliver every healthy group before that failure held them up (CI saw a 40 ms
  // wait without parkAfterAttempts), and the wait measured would be the race's, not the hold-up's.
  await put(...poisonFirst());
  const failedOnce = Date.now() + 10_000;
  while (!subscriber.calls.some((c) => c.eventGroupId === 'order/o-1' && !c.ok)) {
    if (Date.now() > failedOnce)
      throw new Error(`${consumer}: the poison's first call did not fail within 10 s`);
    await new Promise((r) => setTimeout(r, 2));
  }
  await put(...traffic());
  await subscriber.idle(20_000);
  // How long the healthy aggregates' events waited between the bus's acceptance and their effect.
  const waits = bus.events
    .slice(before)
    .map((e) => {
      const m = (e.detail as { metadata: { aggregateId: string; sequence: number } }).metadata;
      return { label: `${m.aggregateId}#${m.sequence}`, receivedAt: e.receivedAt };
    })
    .filter((e) => !e.label.startsWith('o-1#'))
    .map((e) => (appliedAt.get(`${consumer} ${e.label}`) ?? Number.NaN) - e.receivedAt);
  return { subscriber, maxWait: Math.max(...waits) };
}

const effects = async (consumer: string) =>
  (
    await db.sql<{ label: string; arrival: string }[]>`
      select label, arrival from effect where consumer = ${consumer} order by ctid`
  ).map((r) => `${r.label} ${r.arrival}`);

const records = (consumer: string, aggregateId: string) =>
  db.sql<{ sequence: string; outcome: string; holds_chain: boolean | null; reason: string | null }[]>`
    select sequence, outcome, holds_chain, reason from inbox_message
    where consumer = ${consumer} and aggregate_id = ${aggregateId} order by sequence`;

const cli = (args: string[]) =>
  runCli(args, {
    bin: OUTBOX_BIN,
    env: {
      HOME: process.env.HOME,
      DATABASE_URL: db.url,
      AWS_ENDPOINT_URL_LAMBDA: lambda.url,
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'local',
      AWS_SECRET_ACCESS_KEY: 'local',
      AWS_EC2_METADATA_DISABLED: 'true',
    },
  });

describe('parkAfterAttempts on a FIFO subscriber whose failed call holds up every group', () => {
  it("bounds the other aggregates' delay; the poisoned aggregate parks in order and replays in order with the CLI", async () => {
    const without = await run('billing-unbounded', undefined);
    await without.subscriber.close();
    const bounded = await run('billing', 3);
    process.stdout.write(
      `parkAfterAttempts: the other aggregates waited at most ${bounded.maxWait} ms with parkAfterAttempts 3, ` +
        `${without.maxWait} ms without (retry delay ${RETRY_DELAY_MS} ms, ${MAX_RETRIES} retries before the dead letter)\n`,
    );
    // Without: the poison holds every group through all its retries, then is dead-lettered.
    expect(without.subscriber.stats.deadLettered + without.subscriber.stats.dropped).toBe(1);
    // (its first failure came before the healthy events: MAX_RETRIES retry delays remain, less the poll's few ms)
    expect(without.maxWait).toBeGreaterThanOrEqual((MAX_RETRIES - 1) * RETRY_DELAY_MS);
    // With: two failed calls and their two retry delays, then the third call parks it and answers.
    expect(bounded.subscriber.stats.deadLettered + bounded.subscriber.stats.dropped).toBe(0);
    const poisonCalls = bounded.subscriber.calls.filter((c) => c.eventGroupId === 'order/o-1' && !c.ok);
    expect(poisonCalls).toHaveLength(2);
    expect(bounded.maxWait).toBeLessThan(without.maxWait / 2);
    expect(bounded.maxWait).toBeLessThan(2 * RETRY_DELAY_MS + 1000);

    // The healthy aggregates are applied in order; of o-1 only #1.
    const applied = await effects('billing');
    expect(applied.filter((l) => l.startsWith('o-2'))).toEqual(['o-2#1 next', 'o-2#2 next', 'o-2#3 next']);
    expect(applied.filter((l) => l.startsWith('o-3'))).toEqual(['o-3#1 next', 'o-3#2 next', 'o-3#3 next']);
    expect(applied.filter((l) => l.startsWith('o-1'))).toEqual(['o-1#1 next']);
    // o-1's #2 parked for its handler's failures, #3 to #5 behind it, all holding the aggregate.
    const o1 = await records('billing', 'o-1');
    expect(o1.map((r) => [r.sequence, r.outcome, r.holds_chain])).toEqual([
      ['1', 'processed', null],
      ['2', 'parked', true],
      ['3', 'parked', true],
      ['4', 'parked', true],
      ['5', 'parked', true],
    ]);
    expect(o1[1]?.reason).toMatch(
      /^handler failed 3 time\(s\) \(parkAfterAttempts 3\).*last error: Error: cannot invoice o-1: poison/,
    );
    expect(o1[2]?.reason).toMatch(/^held behind event .* \(#2 of order\/o-1\)/);
    // Acknowledged: no failure trace is left to count.
    expect(await db.sql`select * from inbox_failed where consumer = 'billing'`).toEqual([]);

    // `outbox inbox parked list` shows them, in order.
    const listed = await cli(['inbox', 'parked', 'list', '--consumer', 'billing', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const parked = JSON.parse(listed.stdout) as { aggregateId: string; sequence: number; state: string }[];
    expect(parked.map((p) => `${p.aggregateId}#${p.sequence} ${p.state}`)).toEqual([
      'o-1#2 parked',
      'o-1#3 parked',
      'o-1#4 parked',
      'o-1#5 parked',
    ]);

    // Fixed, then replayed with the documented command: applied in order, once each.
    poisonFixed = true;
    const replay = await cli([
      'inbox',
      'parked',
      'replay',
      '--consumer',
      'billing',
      '--all',
      '--function-name',
      'billing-fn',
      '--yes',
    ]);
    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.stdout).toMatch(/replayed 4 of 4 parked event\(s\) through billing-fn/);
    expect((await effects('billing')).filter((l) => l.startsWith('o-1'))).toEqual([
      'o-1#1 next',
      'o-1#2 replayed',
      'o-1#3 replayed',
      'o-1#4 replayed',
      'o-1#5 replayed',
    ]);
    expect((await records('billing', 'o-1')).map((r) => [r.outcome, r.holds_chain])).toEqual(
      Array.from({ length: 5 }, () => ['processed', null]),
    );

    // The aggregate is released: its next event is applied in order.
    await put(entry('o-1', 6));
    await bounded.subscriber.idle(10_000);
    expect((await effects('billing')).at(-1)).toBe('o-1#6 next');
  });
});

/** An event of aggregate o-9, as delivered straight to the handler. */
const event = (sequence: number, data: Record<string, unknown> = {}) =>
  delivery({
    detailType: 'OrderChanged',
    metadata: { eventId: randomUUID(), aggregateId: 'o-9', sequence },
    data,
  });
const eventIdOf = (e: EventBridgeEvent<string, unknown>) =>
  (e.detail as { metadata: { eventId: string } }).metadata.eventId;

describe('what counts towards parkAfterAttempts', () => {
  it('only handler failures: retries waiting for a missing earlier event (InboxGapError) do not count', async () => {
    const handler = inbox(
      {
        sql: db.sql,
        consumer: 'gaps',
        order: 'wait-for-gap',
        gapWaitSeconds: 60,
        parkAfterAttempts: 1,
        metrics: false,
      },
      async (_e, { inbox: i }) => {
        await i.tx`insert into effect values ('gaps', ${`o-9#${i.metadata.sequence}`}, ${i.arrival})`;
        return 'ok';
      },
    );
    const first = event(1);
    const second = event(2);
    // #2 before #1, five times: each a gap retry, traced as an attempt, none a handler failure.
    for (let n = 0; n < 5; n++) {
      await expect(handler({ ...second, id: randomUUID() }, lambdaContext(10_000))).rejects.toMatchObject({
        name: 'InboxGapError',
      });
    }
    const [trace] = await db.sql<{ attempts: number; handler_failures: number }[]>`
      select attempts, handler_failures from inbox_failed where consumer = 'gaps' and event_id = ${eventIdOf(second)}`;
    expect(trace).toEqual({ attempts: 5, handler_failures: 0 });
    // #1 comes: both are applied, none parked although parkAfterAttempts is 1.
    expect(await handler(first, lambdaContext(10_000))).toBe('ok');
    expect(await handler({ ...second, id: randomUUID() }, lambdaContext(10_000))).toBe('ok');
    expect(await effects('gaps')).toEqual(['o-9#1 next', 'o-9#2 next']);
  });

  it('parks on the failure that reaches the limit, and counts each handler failure once', async () => {
    let failing = true;
    const handler = inbox(
      { sql: db.sql, consumer: 'count', order: 'none', parkAfterAttempts: 2, metrics: false },
      async () => {
        if (failing) throw new TypeError('broken');
        return 'ok';
      },
    );
    const e = event(1);
    await expect(handler(e, lambdaContext(10_000))).rejects.toThrow('broken');
    const [trace] = await db.sql<{ handler_failures: number }[]>`
      select handler_failures from inbox_failed where consumer = 'count'`;
    expect(trace?.handler_failures).toBe(1);
    expect(await handler(e, lambdaContext(10_000))).toEqual({ inbox: 'parked', eventId: eventIdOf(e) });
    // A later event of the same aggregate parks behind it, without running the handler.
    failing = false;
    const next = event(2);
    expect(await handler(next, lambdaContext(10_000))).toEqual({ inbox: 'parked', eventId: eventIdOf(next) });
    // Another aggregate is not held.
    const other = delivery({ metadata: { aggregateId: 'o-10', sequence: 1 } });
    expect(await handler(other, lambdaContext(10_000))).toBe('ok');
  });

  it('an event whose failed attempts could not park it (out of time) is parked on its next delivery, unrun', async () => {
    let runs = 0;
    const handler = inbox(
      { sql: db.sql, consumer: 'late', order: 'none', parkAfterAttempts: 2, metrics: false },
      async () => {
        runs++;
        return 'ok';
      },
    );
    const e = event(1);
    // Two handler failures traced, as attempts that ran past their deadline leave them.
    await db.sql`insert into inbox_failed (consumer, event_id, event, error_name, error_message, attempts, handler_failures)
      values ('late', ${eventIdOf(e)}, ${db.sql.json(e as never)}, 'InboxAbortedError', 'deadline', 2, 2)`;
    expect(await handler(e, lambdaContext(10_000))).toEqual({ inbox: 'parked', eventId: eventIdOf(e) });
    expect(runs).toBe(0);
  });

  it('refuses a parkAfterAttempts that is not a whole number from 1, naming the option (and the variable)', () => {
    const make = (parkAfterAttempts: unknown) => () =>
      inbox({ sql: db.sql, consumer: 'x', parkAfterAttempts: parkAfterAttempts as number }, async () => 1);
    for (const bad of [0, 1.5, -1, '3']) {
      expect(make(bad)).toThrow(InboxOptionsError);
      expect(make(bad)).toThrow(/parkAfterAttempts/);
    }
    const previous = process.env[EnvVar.inboxParkAfterAttempts];
    process.env[EnvVar.inboxParkAfterAttempts] = 'three';
    try {
      expect(make(undefined)).toThrow(/OUTBOX_INBOX_PARK_AFTER_ATTEMPTS="three"/);
      process.env[EnvVar.inboxParkAfterAttempts] = '4';
      expect(make(undefined)).not.toThrow();
    } finally {
      if (previous === undefined) delete process.env[EnvVar.inboxParkAfterAttempts];
      else process.env[EnvVar.inboxParkAfterAttempts] = previous;
    }
  });
});

describe('parkAfterAttempts under a middleware that answers a failure with a success', () => {
  // The inbox model's seed -1282648755 (swallowing, parkAfterAttempts 2): a parked event's replay
  // failed, answered for by the middleware, then its next delivery failed and parked it. Two
  // failures since it was parked, each counted once: the trace's attempt row (written before the
  // transaction under middy's AbortSignal) counts no handler failure, its failure write counts one.
  it('counts each swallowed handler failure once, a failed replay included, and parks on the second', async () => {
    let failing = true;
    let runs = 0;
    const handler = middy<EventBridgeEvent<string, unknown>, unknown>()
      .use({ onError: async () => ({ handled: true }) })
      .handler(
        inbox(
          { sql: db.sql, consumer: 'swallow', order: 'none', parkAfterAttempts: 2, metrics: false },
          async (_e, { inbox: i }) => {
            runs++;
            await i.tx`insert into effect values ('swallow', ${`o-9#${i.metadata.sequence}`}, ${i.arrival})`;
            if (failing) throw new Error('the handler failed (injected)');
            return 'ok';
          },
        ),
      ) as unknown as (e: EventBridgeEvent<string, unknown>, c: unknown) => Promise<unknown>;
    const invoke = (e: EventBridgeEvent<string, unknown>) =>
      handler({ ...e, id: randomUUID() }, lambdaContext(10_000));
    const first = event(1);
    const second = event(2);
    const state = async (e: EventBridgeEvent<string, unknown>) => {
      const [row] = await db.sql<
        { outcome: string | null; reason: string | null; handler_failures: number | null }[]
      >`
        select m.outcome, m.reason, f.handler_failures
        from (select 1) as one
        left join inbox_message m on m.consumer = 'swallow' and m.event_id = ${eventIdOf(e)}
        left join inbox_failed f on f.consumer = 'swallow' and f.event_id = ${eventIdOf(e)}`;
      return row;
    };

    // 1st failure, answered for: traced once, not parked (Lambda saw a success).
    expect(await invoke(first)).toEqual({ handled: true });
    expect(await state(first)).toEqual({ outcome: null, reason: null, handler_failures: 1 });
    // 2nd failure (a redelivery, as the operator's `failed replay` makes): parked, holding o-9.
    expect(await invoke(first)).toEqual({ inbox: 'parked', eventId: eventIdOf(first) });
    expect(await state(first)).toMatchObject({ outcome: 'parked', handler_failures: null });
    expect((await state(first))?.reason).toMatch(/^handler failed 2 time\(s\) \(parkAfterAttempts 2\)/);
    expect(await invoke(second)).toEqual({ inbox: 'parked', eventId: eventIdOf(second) });

    // Replayed while the handler still fails: the replay's failure is answered for, counted once;
    // the record stays marked for replay, not parked after 1 failure.
    const marked = await markParkedForReplay(db.sql, { consumer: 'swallow' });
    expect(marked.map((p) => p.sequence)).toEqual([1, 2]);
    expect(await invoke(marked[0]?.event as EventBridgeEvent<string, unknown>)).toEqual({ handled: true });
    expect(await state(first)).toMatchObject({ outcome: 'replaying', handler_failures: 1 });
    // #2 stays behind #1, its handler not run.
    const before = runs;
    expect(await invoke(marked[1]?.event as EventBridgeEvent<string, unknown>)).toEqual({
      inbox: 'parked',
      eventId: eventIdOf(second),
    });
    expect(runs).toBe(before);
    // Its next delivery fails again: 2 failures since it was parked, parked again.
    expect(await invoke(first)).toEqual({ inbox: 'parked', eventId: eventIdOf(first) });
    expect(await state(first)).toMatchObject({ outcome: 'parked', handler_failures: null });
    expect((await state(first))?.reason).toMatch(/^handler failed 2 time\(s\) \(parkAfterAttempts 2\)/);
    // 1 + 1 + 1 + 1 handler runs, no effect committed.
    expect(runs).toBe(4);
    expect(await effects('swallow')).toEqual([]);

    // Fixed and replayed in order: each applied once.
    failing = false;
    for (const p of await markParkedForReplay(db.sql, { consumer: 'swallow' })) await invoke(p.event);
    expect(await effects('swallow')).toEqual(['o-9#1 replayed', 'o-9#2 replayed']);
    expect(await db.sql`select * from inbox_failed where consumer = 'swallow'`).toEqual([]);
  });
});
