/**
 * What an order-aware consumer may rely on: each test is one row of the table in docs/inbox-order.md#every-situation-in-every-mode (order mode
 * × situation → what happens), run for every mode, asserting what the handler applied and what the
 * inbox recorded. Time is the database's: a wait is "passed" by back-dating the inbox's
 * timestamps, never by sleeping. Deliveries are shaped as EventBridge hands them to Lambda, each
 * with a new EventBridge `id`, as every redelivery and retry has.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import postgres from 'postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { type InboxOptions, inbox } from '../../shared/consumer/index.ts';
import { pruneInboxBatch } from '../../shared/relay/operations/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 10 });
  await db.sql`create table applied (consumer text not null, event_id text not null, type text not null,
    sequence int not null, arrival text not null)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, applied`;
});

/** The four behaviours a consumer can choose. */
const MODES = ['none', 'ignore-stale', 'process', 'park'] as const;
type Mode = (typeof MODES)[number];

const optionsOf = (mode: Mode): Partial<InboxOptions<Record<string, unknown>>> =>
  mode === 'none' || mode === 'ignore-stale'
    ? { order: mode }
    : { order: 'wait-for-gap', gapWaitSeconds: 120, onGapTimeout: mode };

interface EventSpec {
  type?: string;
  source?: string;
  aggregateId?: string;
  typeSequence?: number;
  data?: Record<string, unknown>;
  eventId?: string;
}

/** One outbox event; `deliver` hands it to Lambda again and again, as EventBridge and Lambda do. */
function outboxEvent(sequence: number, o: EventSpec = {}): EventBridgeEvent<string, unknown> {
  return delivery({
    detailType: o.type ?? 'OrderChanged',
    source: o.source ?? 'shop.orders',
    metadata: {
      eventId: o.eventId ?? randomUUID(),
      aggregateId: o.aggregateId ?? 'o-1',
      sequence,
      ...(o.typeSequence === undefined ? {} : { typeSequence: o.typeSequence }),
    },
    data: o.data ?? {},
  }) as EventBridgeEvent<string, unknown>;
}

/**
 * A consumer whose effect is a row in `applied`. `deliver` returns what became of the delivery: the
 * arrival of an applied event (`next`, `ahead`, `late`, `unordered`, `replayed`), the skip
 * (`duplicate`, `stale`, `parked`), or the name of the error the invocation failed with.
 */
function consumer(name: string, options: Partial<InboxOptions<Record<string, unknown>>> = {}) {
  const metrics: string[] = [];
  const handler = inbox(
    {
      sql: db.sql,
      consumer: name,
      metrics: {
        // The inbox's counts; ConsumerLag (one per applied event) is covered by consumer-lag.test.ts.
        write: (line) => {
          const name = Object.keys(JSON.parse(line)).find((k) => k.startsWith('Inbox'));
          if (name) metrics.push(name);
        },
      },
      ...options,
    },
    async (event, { inbox: i }) => {
      await i.tx`insert into applied values (${name}, ${i.metadata.eventId}, ${event['detail-type']}, ${i.metadata.sequence}, ${i.arrival})`;
      if (i.data.fail) throw new Error('the handler failed');
    },
  );
  const deliver = (event: EventBridgeEvent<string, unknown>) =>
    handler({ ...event, id: randomUUID() }, lambdaContext(10_000)).then(
      (r) => (r as { inbox?: string } | undefined)?.inbox ?? lastArrival(name, event),
      (e: Error) => e.name,
    );
  return { deliver, metrics };
}

async function lastArrival(name: string, event: EventBridgeEvent<string, unknown>): Promise<string> {
  const eventId = (event.detail as { metadata: { eventId: string } }).metadata.eventId;
  const [row] = await db.sql<{ arrival: string }[]>`
    select arrival from applied where consumer = ${name} and event_id = ${eventId} order by ctid desc limit 1`;
  return row?.arrival ?? 'nothing applied';
}

/** The database clock moves on by `seconds` for the inbox: its timestamps are back-dated. */
async function elapse(seconds: number): Promise<void> {
  await db.sql`update inbox_gap set first_seen_at = first_seen_at - make_interval(secs => ${seconds}),
                                    last_seen_at = last_seen_at - make_interval(secs => ${seconds})`;
}

/**
 * Lambda's asynchronous invocation of one event: the first attempt, then retries 60 and 180 s after
 * it while it fails (its default MaximumRetryAttempts, 2). Returns each attempt's outcome.
 */
async function lambdaAttempts(
  deliver: (e: EventBridgeEvent<string, unknown>) => Promise<string>,
  event: EventBridgeEvent<string, unknown>,
): Promise<string[]> {
  const outcomes: string[] = [];
  let at = 0;
  for (const t of [0, 60, 180]) {
    await elapse(t - at);
    at = t;
    const outcome = await deliver(event);
    outcomes.push(outcome);
    if (!outcome.startsWith('Inbox') && outcome !== 'Error') break;
  }
  return outcomes;
}

const appliedOf = async (name: string) =>
  (
    await db.sql<{ sequence: number }[]>`select sequence from applied where consumer = ${name} order by ctid`
  ).map((r) => r.sequence);

const recordOf = async (name: string, event: EventBridgeEvent<string, unknown>) => {
  const eventId = (event.detail as { metadata: { eventId: string } }).metadata.eventId;
  const [row] = await db.sql<{ outcome: string; reason: string | null; kept: boolean }[]>`
    select outcome, reason, event is not null as kept from inbox_message where consumer = ${name} and event_id = ${eventId}`;
  return row;
};

/** Runs `scenario` for every mode and compares its outcomes with the table's row. */
async function row(
  expected: Record<Mode, unknown>,
  scenario: (c: ReturnType<typeof consumer>, mode: Mode, name: string) => Promise<unknown>,
): Promise<void> {
  const actual: Partial<Record<Mode, unknown>> = {};
  for (const mode of MODES) {
    const name = `c-${mode}`;
    actual[mode] = await scenario(consumer(name, optionsOf(mode)), mode, name);
  }
  expect(actual).toEqual(expected);
}

describe('order mode × situation (the table in docs/inbox-order.md)', () => {
  it('duplicate: the same event again, one after the other or at once, is applied once', async () => {
    await row(
      {
        none: { outcomes: ['unordered', 'duplicate', 'duplicate'], applied: [1, 2] },
        'ignore-stale': { outcomes: ['next', 'duplicate', 'duplicate'], applied: [1, 2] },
        process: { outcomes: ['next', 'duplicate', 'duplicate'], applied: [1, 2] },
        park: { outcomes: ['next', 'duplicate', 'duplicate'], applied: [1, 2] },
      },
      async ({ deliver }, _mode, name) => {
        const one = outboxEvent(1);
        const outcomes = [await deliver(one), await deliver(one), await deliver(one)];
        const two = outboxEvent(2);
        const together = await Promise.all([deliver(two), deliver(two), deliver(two)]);
        expect(together.filter((o) => o === 'duplicate')).toHaveLength(2);
        return { outcomes, applied: await appliedOf(name) };
      },
    );
  });

  it("reordered within Lambda's retry window: #2 before #1", async () => {
    await row(
      {
        none: { outcomes: [['unordered'], ['unordered']], applied: [2, 1] },
        'ignore-stale': { outcomes: [['ahead'], ['stale']], applied: [2] },
        process: { outcomes: [['InboxGapError'], ['next'], ['next']], applied: [1, 2] },
        park: { outcomes: [['InboxGapError'], ['next'], ['next']], applied: [1, 2] },
      },
      async ({ deliver }, mode, name) => {
        const [one, two] = [outboxEvent(1), outboxEvent(2)];
        const first = [await deliver(two)];
        const outcomes = [first, [await deliver(one)]];
        if (first[0] === 'InboxGapError') {
          await elapse(60); // Lambda's first retry of #2
          outcomes.push([await deliver(two)]);
        }
        if (mode === 'ignore-stale') {
          expect(await recordOf(name, one)).toMatchObject({
            outcome: 'stale',
            reason: expect.stringMatching(/superseded by #2/),
          });
        }
        return { outcomes, applied: await appliedOf(name) };
      },
    );
  });

  it('missing: #2 never comes; #3 on Lambda’s schedule, then #4 (a parked event does not hold its aggregate back)', async () => {
    await row(
      {
        none: { three: ['unordered'], four: 'unordered', applied: [1, 3, 4], metrics: [] },
        'ignore-stale': { three: ['ahead'], four: 'next', applied: [1, 3, 4], metrics: ['InboxAfterGap'] },
        // Each designed retry (InboxGapError) is counted apart: the errors alarm subtracts it.
        process: {
          three: ['InboxGapError', 'InboxGapError', 'ahead'],
          four: 'next',
          applied: [1, 3, 4],
          metrics: ['InboxGapRetry', 'InboxGapRetry', 'InboxAfterGap'],
        },
        park: {
          three: ['InboxGapError', 'InboxGapError', 'parked'],
          four: 'next',
          applied: [1, 4],
          metrics: ['InboxGapRetry', 'InboxGapRetry', 'InboxParked'],
        },
      },
      async ({ deliver, metrics }, mode, name) => {
        await deliver(outboxEvent(1));
        const e3 = outboxEvent(3);
        const three = await lambdaAttempts(deliver, e3);
        const four = await deliver(outboxEvent(4));
        if (mode === 'park') {
          expect(await recordOf(name, e3)).toMatchObject({
            outcome: 'parked',
            kept: true,
            // One missing event is named once: #2, not #2…#2.
            reason: expect.stringMatching(/^#2 of \S+ still missing after 180 s/),
          });
        }
        // No gap row is left behind by an event that was decided.
        expect(await db.sql`select * from inbox_gap where consumer = ${name}`).toEqual([]);
        return { three, four, applied: await appliedOf(name), metrics: [...metrics] };
      },
    );
  });

  it('late: #2 comes after #3 was taken (a dead letter replayed, an on-failure replay); later events go on', async () => {
    await row(
      {
        none: { two: 'unordered', five: 'unordered', applied: [1, 3, 4, 2, 5] },
        'ignore-stale': { two: 'stale', five: 'next', applied: [1, 3, 4, 5] },
        process: { two: 'late', five: 'next', applied: [1, 3, 4, 2, 5] },
        park: { two: 'late', five: 'next', applied: [1, 4, 2, 5] },
      },
      async ({ deliver, metrics }, mode, name) => {
        await deliver(outboxEvent(1));
        await lambdaAttempts(deliver, outboxEvent(3));
        await deliver(outboxEvent(4));
        const e2 = outboxEvent(2);
        const two = await deliver(e2);
        const five = await deliver(outboxEvent(5));
        if (mode === 'ignore-stale') {
          expect(await recordOf(name, e2)).toMatchObject({ outcome: 'stale' });
          expect(metrics).toContain('InboxStale');
        }
        if (mode === 'process' || mode === 'park') expect(metrics).toContain('InboxLate');
        return { two, five, applied: await appliedOf(name) };
      },
    );
  });

  it("Lambda's last retries out of order: #4's before #3's, both waiting for a missing #2: #3 decides the gap, #4 follows it", async () => {
    await row(
      {
        none: { applied: [3, 4] },
        'ignore-stale': { applied: [3, 4] },
        // #4's wait is over, but #3 waits below it: #4 waits in its invocation for #3's decision
        process: { four: 'next', three: 'ahead', applied: [3, 4] },
        park: { four: 'next', three: 'parked', applied: [4] },
      },
      async ({ deliver }, mode, name) => {
        await deliver(outboxEvent(1));
        await db.sql`truncate applied`;
        const [e3, e4] = [outboxEvent(3), outboxEvent(4)];
        if (mode === 'none' || mode === 'ignore-stale') {
          await deliver(e3);
          await deliver(e4);
          return { applied: await appliedOf(name) };
        }
        for (const t of [0, 60]) {
          await elapse(t === 0 ? 0 : 60);
          expect([await deliver(e3), await deliver(e4)]).toEqual(['InboxGapError', 'InboxGapError']);
        }
        await elapse(120);
        const four = deliver(e4);
        await new Promise((resolve) => setTimeout(resolve, 300)); // #4's last attempt comes first
        const three = await deliver(e3);
        return { four: await four, three, applied: await appliedOf(name) };
      },
    );
  });

  it("Lambda's last retries out of order, and #3's never comes: #4 waits half its invocation, then takes the gap's timeout action; #3 is late", async () => {
    await row(
      {
        none: { applied: [4, 3] },
        'ignore-stale': { applied: [4] },
        process: { four: 'ahead', three: 'late', applied: [4, 3] },
        park: { four: 'parked', three: 'late', applied: [3] },
      },
      async ({ deliver }, mode, name) => {
        await deliver(outboxEvent(1));
        await db.sql`truncate applied`;
        const [e3, e4] = [outboxEvent(3), outboxEvent(4)];
        if (mode === 'none' || mode === 'ignore-stale') {
          await deliver(e4);
          await deliver(e3);
          return { applied: await appliedOf(name) };
        }
        for (const t of [0, 60]) {
          await elapse(t === 0 ? 0 : 60);
          expect([await deliver(e3), await deliver(e4)]).toEqual(['InboxGapError', 'InboxGapError']);
        }
        await elapse(120);
        const started = Date.now();
        const four = await deliver(e4); // a 10 s invocation: waits about 4.75 s for #3
        expect(Date.now() - started).toBeGreaterThan(4_000);
        expect(Date.now() - started).toBeLessThan(7_000);
        const three = await deliver(e3);
        if (mode === 'park') {
          expect(await recordOf(name, e4)).toMatchObject({
            outcome: 'parked',
            reason: expect.stringMatching(/#3 was seen waiting, but did not come again in time/),
          });
        }
        return { four, three, applied: await appliedOf(name) };
      },
    );
  });

  it('an event whose wait for a lower one ran out decides once more, without waiting again', async () => {
    // Counts the inbox's decisions (each begins with the record's insert) on a pool of its own.
    let decisions = 0;
    const counted = postgres(db.url, {
      max: 2,
      onnotice: () => {},
      debug: (_connection, query) => {
        if (query.includes('insert into outbox.inbox_message')) decisions++;
      },
    });
    try {
      const handler = inbox(
        { sql: counted, consumer: 'ran-out', order: 'wait-for-gap', metrics: false },
        async (_event, { inbox: i }) => i.arrival,
      );
      const deliver = (e: EventBridgeEvent<string, unknown>, ms: number) =>
        handler({ ...e, id: randomUUID() }, lambdaContext(ms)).then(
          (r) => (typeof r === 'string' ? r : (r as { inbox: string }).inbox),
          (e: Error) => e.name,
        );
      const [e3, e4] = [
        outboxEvent(3, { aggregateId: 'ran-out' }),
        outboxEvent(4, { aggregateId: 'ran-out' }),
      ];
      expect(await deliver(outboxEvent(1, { aggregateId: 'ran-out' }), 10_000)).toBe('next');
      expect([await deliver(e3, 10_000), await deliver(e4, 10_000)]).toEqual([
        'InboxGapError',
        'InboxGapError',
      ]);
      await elapse(180);
      decisions = 0;
      // #4's wait is over and #3 waits below it, but #3 never comes: one decision that waits, then
      // one that takes the timeout action (a 3 s invocation: about 1.25 s of waiting).
      expect(await deliver(e4, 3_000)).toBe('ahead');
      expect(decisions).toBe(2);
    } finally {
      await counted.end({ timeout: 1 });
    }
  });

  it('a burst behind one missing event: #2 never comes, #3…#12 follow, their last attempts in shuffled order, at once: applied in order', async () => {
    const burst = Array.from({ length: 10 }, (_, i) => i + 3);
    await row(
      {
        none: { applied: burst.length },
        'ignore-stale': { applied: burst.length },
        process: { three: 'ahead', applied: [1, ...burst] },
        park: { three: 'parked', applied: [1, ...burst.slice(1)] },
      },
      async ({ deliver }, mode, name) => {
        await deliver(outboxEvent(1));
        const events = burst.map((n) => outboxEvent(n));
        if (mode === 'none' || mode === 'ignore-stale') {
          for (const e of events) await deliver(e);
          return { applied: (await appliedOf(name)).length - 1 };
        }
        for (const t of [0, 60]) {
          await elapse(t === 0 ? 0 : 60);
          for (const e of events) expect(await deliver(e)).toBe('InboxGapError');
        }
        await elapse(120);
        // The last attempts, in an order where the lowest comes late: #9 #12 #4 #11 #6 #3 …
        const shuffled = [6, 9, 1, 8, 3, 0, 7, 2, 5, 4].map((i) => events[i] as (typeof events)[number]);
        const outcomes = await Promise.all(
          shuffled.map(async (e, i) => {
            await new Promise((resolve) => setTimeout(resolve, i * 40));
            return deliver(e);
          }),
        );
        const three = outcomes[shuffled.indexOf(events[0] as (typeof events)[number])];
        expect(outcomes.filter((o) => o === 'next')).toHaveLength(burst.length - 1);
        return { three, applied: await appliedOf(name) };
      },
    );
  });

  it('a late retry does not restart the wait: one retry (window 60 s, wait 50 s) coming at 61 or 65 s, or the defaults with attempt 2 failing for another reason', async () => {
    for (const [retryAt, mode] of [
      [61, 'process'],
      [65, 'park'],
    ] as const) {
      const name = `one-retry-${retryAt}`;
      const { deliver } = consumer(name, {
        order: 'wait-for-gap',
        gapWaitSeconds: 50,
        retryWindowSeconds: 60,
        onGapTimeout: mode,
      });
      await deliver(outboxEvent(1, { aggregateId: name }));
      const e3 = outboxEvent(3, { aggregateId: name });
      expect(await deliver(e3)).toBe('InboxGapError');
      await elapse(retryAt);
      expect(await deliver(e3)).toBe(mode === 'process' ? 'ahead' : 'parked');
    }
    // Defaults: attempt 2 at 60 s fails for another reason (the database unreachable: it never
    // reaches the inbox); attempt 3 at 180 s finds its wait over, measured from attempt 1.
    const { deliver } = consumer('attempt-2-lost', { order: 'wait-for-gap' });
    await deliver(outboxEvent(1, { aggregateId: 'lost' }));
    const e3 = outboxEvent(3, { aggregateId: 'lost' });
    expect(await deliver(e3)).toBe('InboxGapError');
    await elapse(180);
    expect(await deliver(e3)).toBe('ahead');
    // A redelivery after longer than the maximum event age (a replay) waits anew.
    const e5 = outboxEvent(5, { aggregateId: 'lost' });
    expect(await deliver(e5)).toBe('InboxGapError');
    await elapse(21_601);
    expect(await deliver(e5)).toBe('InboxGapError');
  });

  it('replay from the on-failure destination days later, in the wrong order: #4 waits for #3 anew instead of jumping its gap', async () => {
    // #3 and #4 fail on every attempt (a handler bug since fixed) and end in the on-failure
    // destination; days later the operator replays both records, #4's first.
    const E = 'Error';
    const G = 'InboxGapError';
    await row(
      {
        none: {
          attempts: [
            [E, E],
            [E, E],
            [E, E],
          ],
          replays: ['unordered', 'unordered'],
          applied: [1, 2, 4, 3],
        },
        'ignore-stale': {
          attempts: [
            [E, E],
            [E, E],
            [E, E],
          ],
          replays: ['ahead', 'stale'],
          applied: [1, 2, 4],
        },
        process: {
          attempts: [
            [E, G],
            [E, G],
            [E, E],
          ],
          replays: [G, 'next', 'next'],
          applied: [1, 2, 3, 4],
        },
        // #4 was parked by its last attempt (the operator re-applies it, see the CLI's tests).
        park: {
          attempts: [
            [E, G],
            [E, G],
            [E, 'parked'],
          ],
          // #4's replay finds it parked: it stays parked, answered so (issue 45, item 4).
          replays: ['parked', 'late'],
          applied: [1, 2, 3],
        },
      },
      async ({ deliver }, _mode, name) => {
        await deliver(outboxEvent(1));
        await deliver(outboxEvent(2));
        const [f3, f4] = [outboxEvent(3, { data: { fail: true } }), outboxEvent(4, { data: { fail: true } })];
        const attempts: string[][] = [];
        for (const wait of [0, 60, 120]) {
          await elapse(wait);
          attempts.push([await deliver(f3), await deliver(f4)]);
        }
        await elapse(3 * 86_400);
        const fixed = (e: EventBridgeEvent<string, unknown>) => ({
          ...e,
          detail: { ...(e.detail as object), data: {} },
        });
        const replays = [await deliver(fixed(f4)), await deliver(fixed(f3))];
        if (replays[0] === G) {
          await elapse(60); // the replayed invocation's own retry
          replays.push(await deliver(fixed(f4)));
        }
        return { attempts, replays, applied: await appliedOf(name) };
      },
    );
  });

  it('subset of types: a consumer declaring `types` waits only for the previous event of each type it receives', async () => {
    // Order o-1: OrderPlaced #1, OrderPaid #2, OrderShipped #3, OrderPaid #4, OrderPaid #6. The
    // rule delivers OrderPaid only: typeSequence 1, 2, 3.
    const paid = (sequence: number, typeSequence: number) =>
      outboxEvent(sequence, { type: 'OrderPaid', typeSequence });
    await row(
      {
        none: { outcomes: ['unordered', 'unordered', 'unordered'], applied: [2, 6, 4] },
        'ignore-stale': { outcomes: ['next', 'ahead', 'stale'], applied: [2, 6] },
        process: { outcomes: ['next', 'InboxGapError', 'next', 'next'], applied: [2, 4, 6] },
        park: { outcomes: ['next', 'InboxGapError', 'next', 'next'], applied: [2, 4, 6] },
      },
      async (_c, mode, name) => {
        const { deliver } = consumer(name, { ...optionsOf(mode), types: ['OrderPaid'] });
        const [p1, p2, p3] = [paid(2, 1), paid(4, 2), paid(6, 3)];
        const outcomes = [await deliver(p1), await deliver(p3), await deliver(p2)];
        if (outcomes[1] === 'InboxGapError') outcomes.push(await deliver(p3));
        // Another type than declared is refused loudly: the rule and the declaration disagree.
        expect(await deliver(outboxEvent(7, { type: 'OrderShipped', typeSequence: 2 }))).toBe(
          'InboxEnvelopeError',
        );
        return { outcomes, applied: await appliedOf(name) };
      },
    );
  });

  it('subset of types without `types`: waiting for sequences that never come (why the option exists)', async () => {
    // The rule delivers OrderPaid only; the consumer did not say so: OrderPaid #2 (its type's #1).
    await row(
      {
        none: ['unordered'],
        'ignore-stale': ['ahead'],
        process: ['InboxGapError', 'InboxGapError', 'ahead'],
        park: ['InboxGapError', 'InboxGapError', 'parked'],
      },
      async ({ deliver }) => lambdaAttempts(deliver, outboxEvent(2, { type: 'OrderPaid', typeSequence: 1 })),
    );
  });

  it('two sources of one outbox: one chain per aggregate, numbered across sources as the producer numbers it', async () => {
    // The producer's counter is per aggregate, whatever the source: shop.orders #1, shop.crm #2,
    // shop.orders #3, delivered in order.
    await row(
      {
        none: ['unordered', 'unordered', 'unordered'],
        'ignore-stale': ['next', 'next', 'next'],
        process: ['next', 'next', 'next'],
        park: ['next', 'next', 'next'],
      },
      async ({ deliver }) => {
        const outcomes: string[] = [];
        for (const [n, source] of [
          [1, 'shop.orders'],
          [2, 'shop.crm'],
          [3, 'shop.orders'],
        ] as const)
          outcomes.push(await deliver(outboxEvent(n, { source })));
        return outcomes;
      },
    );
  });

  it('an upgrade: the position recorded before migration 010 (no source) is the chain; per-source positions of 010 to 017 are adopted at their highest', async () => {
    await row(
      {
        none: ['unordered', 'unordered', 'unordered', 'unordered'],
        'ignore-stale': ['next', 'stale', 'next', 'next'],
        process: ['next', 'late', 'next', 'next'],
        park: ['next', 'late', 'next', 'next'],
      },
      async ({ deliver }, _mode, name) => {
        // The order state as migration 005's inbox left it: no source, no chain.
        await db.sql`insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, last_sequence)
                     values (${name}, 'order', 'o-1', 5)`;
        // As migrations 010 to 017 left it: one row per source, all numbered by one counter.
        await db.sql`insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence)
                     values (${name}, 'order', 'o-2', 'shop.a', '', 3), (${name}, 'order', 'o-2', 'shop.b', '', 5)`;
        return [
          await deliver(outboxEvent(6)),
          await deliver(outboxEvent(1, { source: 'shop.other' })),
          await deliver(outboxEvent(6, { aggregateId: 'o-2', source: 'shop.a' })),
          await deliver(outboxEvent(7, { aggregateId: 'o-2', source: 'shop.b' })),
        ];
      },
    );
  });

  it('a quiet chain outlives the inbox retention: its next event is next, not parked for events applied long ago', async () => {
    await row(
      {
        none: 'unordered',
        'ignore-stale': 'next',
        process: 'next',
        park: 'next',
      },
      async ({ deliver }, _mode, name) => {
        for (const n of [1, 2, 3]) await deliver(outboxEvent(n, { aggregateId: 'monthly' }));
        // A month later: the monitor prunes what is older than the retention (30 days).
        await db.sql`update inbox_message set processed_at = now() - interval '31 days' where consumer = ${name}`;
        await db.sql`update inbox_aggregate set updated_at = now() - interval '31 days' where consumer = ${name}`;
        while ((await pruneInboxBatch(db.sql, 30 * 86_400, 100)) > 0) {}
        return deliver(outboxEvent(4, { aggregateId: 'monthly' }));
      },
    );
  });

  it('a business key sees the whole event: two types of one order are two keys', async () => {
    const { deliver } = consumer('keyed', { key: ({ type, data }) => `${type}:${String(data.orderId)}` });
    const placed = outboxEvent(1, { type: 'OrderPlaced', data: { orderId: 'A' } });
    expect(await deliver(placed)).toBe('unordered');
    expect(await deliver(outboxEvent(2, { type: 'OrderCancelled', data: { orderId: 'A' } }))).toBe(
      'unordered',
    );
    expect(
      await deliver({
        ...placed,
        detail: {
          ...(placed.detail as object),
          metadata: { ...(placed.detail as { metadata: object }).metadata, eventId: randomUUID() },
        },
      }),
    ).toBe('duplicate');
  });

  it('a business key shared by two aggregates: the second takes its place in its own chain and is not applied twice', async () => {
    await row(
      {
        none: ['unordered', 'duplicate', 'unordered'],
        'ignore-stale': ['next', 'duplicate', 'next'],
        process: ['next', 'duplicate', 'next'],
        park: ['next', 'duplicate', 'next'],
      },
      async (_c, mode, name) => {
        const { deliver } = consumer(name, {
          ...optionsOf(mode),
          key: ({ data }) => `invoice:${String(data.invoice)}`,
        });
        return [
          await deliver(outboxEvent(1, { aggregateId: 'A', data: { invoice: 'INV-1' } })),
          await deliver(outboxEvent(1, { aggregateId: 'B', data: { invoice: 'INV-1' } })),
          await deliver(outboxEvent(2, { aggregateId: 'B', data: { invoice: 'INV-2' } })),
        ];
      },
    );
  });

  it('a malformed position is a typed error naming the field, in every mode', async () => {
    await row(
      {
        none: {
          sequence: Array(6).fill('detail.metadata.sequence'),
          typeSequence: 'detail.metadata.typeSequence',
        },
        'ignore-stale': {
          sequence: Array(6).fill('detail.metadata.sequence'),
          typeSequence: 'detail.metadata.typeSequence',
        },
        process: {
          sequence: Array(6).fill('detail.metadata.sequence'),
          typeSequence: 'detail.metadata.typeSequence',
        },
        park: {
          sequence: Array(6).fill('detail.metadata.sequence'),
          typeSequence: 'detail.metadata.typeSequence',
        },
      },
      async (_c, mode, name) => {
        const handler = inbox(
          { sql: db.sql, consumer: name, metrics: false, ...optionsOf(mode) },
          async () => {},
        );
        const fieldOf = (sequence: unknown, typeSequence?: unknown) => {
          const e = outboxEvent(1);
          const m = (e.detail as { metadata: Record<string, unknown> }).metadata;
          m.sequence = sequence;
          if (typeSequence !== undefined) m.typeSequence = typeSequence;
          return handler(e, lambdaContext(10_000)).then(
            () => 'accepted',
            (error: { name: string; field?: string }) =>
              error.name === 'InboxEnvelopeError' ? error.field : error.name,
          );
        };
        const sequence = [];
        for (const bad of [0, -1, 1.5, 'x', null, 2 ** 53]) sequence.push(await fieldOf(bad));
        expect(await db.sql`select * from inbox_message where consumer = ${name}`).toEqual([]);
        return { sequence, typeSequence: await fieldOf(3, 4) };
      },
    );
  });
});
