import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { delivery } from '../../dev/delivery.ts';
import {
  type InboxContext,
  InboxGapError,
  type InboxOptions,
  InboxOptionsError,
  InboxPayloadError,
  inbox,
} from '../../shared/consumer/index.ts';
import { connect, type Sql } from '../../shared/platform/db.ts';
import { OutboxSchemaError, OutboxValidationError } from '../../shared/platform/errors.ts';
import { defineEvent } from '../../shared/producer/typed-events.ts';
import {
  createEmptyDatabase,
  createTestDatabase,
  type EmptyDatabase,
  type TestDatabase,
} from '../support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 10 });
  await db.sql`create table applied (consumer text not null, aggregate_id text not null, sequence int not null, note text)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, applied`;
});

type Detail = {
  metadata: {
    eventId: string;
    aggregateType: string;
    aggregateId: string;
    sequence: number;
    occurredAt: string;
  };
  data: Record<string, unknown>;
};
const eventFor = (
  sequence: number,
  aggregateId = 'o-1',
  eventId = randomUUID(),
  data: Record<string, unknown> = { n: sequence },
) =>
  delivery({
    detailType: 'OrderChanged',
    region: 'us-east-1',
    metadata: { eventId, aggregateId, sequence },
    data,
  }) as unknown as EventBridgeEvent<'OrderChanged', Detail>;

const context = {} as InboxContext<never>;

/** A consumer whose side effect is a row in `applied`; `fail` makes the handler throw after writing. */
function consumer(
  name: string,
  options: Partial<InboxOptions<Record<string, unknown>>> = {},
  sql: Sql = db.sql,
) {
  let calls = 0;
  const handler = inbox({ sql, consumer: name, metrics: false, ...options }, async (_event, ctx) => {
    calls++;
    const { tx, metadata, data } = ctx.inbox;
    await tx`insert into applied (consumer, aggregate_id, sequence, note) values (${name}, ${metadata.aggregateId}, ${metadata.sequence}, ${String(data.note ?? '')})`;
    if (data.fail) throw new Error('handler failed');
    await new Promise((r) => setTimeout(r, Number(data.delayMs ?? 0)));
  });
  return { handler: (e: EventBridgeEvent<string, unknown>) => handler(e, context), calls: () => calls };
}
const applied = () =>
  db.sql<
    { consumer: string; sequence: number }[]
  >`select consumer, sequence from applied order by consumer, sequence`;

describe('inbox middleware', () => {
  it('applies an event delivered twice once, acknowledging the duplicate', async () => {
    const c = consumer('billing');
    const event = eventFor(1);
    await c.handler(event);
    const second = await c.handler({ ...event, id: randomUUID() });
    expect(second).toEqual({ inbox: 'duplicate', eventId: event.detail.metadata.eventId });
    expect(c.calls()).toBe(1);
    expect(await applied()).toEqual([{ consumer: 'billing', sequence: 1 }]);
  });

  it('applies an event delivered to two concurrent invocations once', async () => {
    const c = consumer('billing');
    const event = eventFor(1, 'o-1', randomUUID(), { n: 1, delayMs: 100 });
    const results = await Promise.all([c.handler(event), c.handler({ ...event, id: randomUUID() })]);
    expect(results.filter((r) => (r as { inbox?: string } | undefined)?.inbox === 'duplicate')).toHaveLength(
      1,
    );
    expect(await applied()).toHaveLength(1);
  });

  it('leaves no inbox record and no partial writes when the handler fails, so a retry applies it', async () => {
    const c = consumer('billing');
    const eventId = randomUUID();
    await expect(c.handler(eventFor(1, 'o-1', eventId, { fail: true }))).rejects.toThrow('handler failed');
    expect(await applied()).toEqual([]);
    expect(await db.sql`select * from inbox_message`).toHaveLength(0);
    await c.handler(eventFor(1, 'o-1', eventId, { n: 1 }));
    expect(await applied()).toHaveLength(1);
  });

  it('lets two consumers each process the same event once', async () => {
    const billing = consumer('billing');
    const shipping = consumer('shipping');
    const event = eventFor(1);
    for (const c of [billing, shipping, billing, shipping]) await c.handler({ ...event, id: randomUUID() });
    expect(await applied()).toEqual([
      { consumer: 'billing', sequence: 1 },
      { consumer: 'shipping', sequence: 1 },
    ]);
  });

  it('can key on a business identity instead of the event id', async () => {
    const c = consumer('billing', { key: ({ data }) => `invoice:${String(data.invoice)}` });
    await c.handler(eventFor(1, 'o-1', randomUUID(), { invoice: 'INV-9' }));
    await c.handler(eventFor(2, 'o-1', randomUUID(), { invoice: 'INV-9' })); // same fact, another route and id
    expect(await applied()).toHaveLength(1);
  });

  it('ignore-stale: with events arriving 3, 1, 2, applies 3 and acknowledges 1 and 2 as stale', async () => {
    const c = consumer('view', { order: 'ignore-stale' });
    const results = [];
    for (const n of [3, 1, 2]) results.push(await c.handler(eventFor(n)));
    expect(results.map((r) => (r as { inbox?: string } | undefined)?.inbox ?? 'applied')).toEqual([
      'applied',
      'stale',
      'stale',
    ]);
    expect((await applied()).map((r) => r.sequence)).toEqual([3]);
    const outcomes = await db.sql<
      { sequence: string; outcome: string }[]
    >`select sequence, outcome from inbox_message order by sequence`;
    expect(outcomes.map((o) => [o.sequence, o.outcome])).toEqual([
      ['1', 'stale'],
      ['2', 'stale'],
      ['3', 'processed'],
    ]);
  });

  it('wait-for-gap: with events arriving 3, 1, 2, fails 3 until 1 and 2 are applied, then applies it', async () => {
    const c = consumer('ledger', { order: 'wait-for-gap', gapWaitSeconds: 120 });
    const three = eventFor(3);
    await expect(c.handler(three)).rejects.toBeInstanceOf(InboxGapError);
    await c.handler(eventFor(1));
    await c.handler(eventFor(2));
    await c.handler({ ...three, id: randomUUID() }); // EventBridge's redelivery
    expect((await applied()).map((r) => r.sequence)).toEqual([1, 2, 3]);
    expect(await db.sql`select * from inbox_gap`).toHaveLength(0);
  });

  it('wait-for-gap: after the wait, processes the event anyway, or parks it when asked to', async () => {
    for (const onGapTimeout of ['process', 'park'] as const) {
      const c = consumer(`gap-${onGapTimeout}`, { order: 'wait-for-gap', gapWaitSeconds: 60, onGapTimeout });
      const three = eventFor(3, `agg-${onGapTimeout}`);
      await expect(c.handler(three)).rejects.toBeInstanceOf(InboxGapError);
      await db.sql`update inbox_gap set first_seen_at = now() - interval '61 seconds'`;
      const result = await c.handler({ ...three, id: randomUUID() });
      if (onGapTimeout === 'process') expect(result).toBeUndefined();
      else expect(result).toEqual({ inbox: 'parked', eventId: three.detail.metadata.eventId });
    }
    expect(await applied()).toEqual([{ consumer: 'gap-process', sequence: 3 }]);
  });

  it("wait-for-gap at the defaults: fails the attempts of Lambda's retry schedule until the last, which applies the event", async () => {
    // Lambda retries a failed asynchronous invocation twice, 1 and then 2 minutes later: attempts
    // at about 0, 60 and 180 s. The gap wait must end before the last one, or the event is dropped.
    const c = consumer('ledger-defaults', { order: 'wait-for-gap' });
    const three = eventFor(3, 'o-gap');
    const outcomes: string[] = [];
    for (const secondsSinceFirst of [0, 60, 180]) {
      await db.sql`update inbox_gap set first_seen_at = now() - make_interval(secs => ${secondsSinceFirst})`;
      outcomes.push(
        await c.handler({ ...three, id: randomUUID() }).then(
          () => 'applied',
          (e: Error) => e.name,
        ),
      );
    }
    expect(outcomes).toEqual(['InboxGapError', 'InboxGapError', 'applied']);
    expect(await applied()).toEqual([{ consumer: 'ledger-defaults', sequence: 3 }]);
  });

  it('rejects a gap wait that does not fit the retry window, and other bad options, naming the option', () => {
    const attempt = (options: Partial<InboxOptions<Record<string, unknown>>>) => {
      try {
        inbox({ sql: db.sql, consumer: 'x', ...options }, async () => {});
        return 'accepted';
      } catch (error) {
        expect(error).toBeInstanceOf(InboxOptionsError);
        return (error as InboxOptionsError).field;
      }
    };
    expect(attempt({ order: 'wait-for-gap', gapWaitSeconds: 300 })).toBe('gapWaitSeconds');
    expect(attempt({ order: 'wait-for-gap', gapWaitSeconds: 50, retryWindowSeconds: 60 })).toBe('accepted');
    expect(attempt({ order: 'wait-for-gap', gapWaitSeconds: 60, retryWindowSeconds: 60 })).toBe(
      'gapWaitSeconds',
    );
    expect(attempt({ order: 'wait-for-gap', gapWaitSeconds: 0, retryWindowSeconds: 0 })).toBe('accepted');
    // Too close to the window for a retry that comes a little early: 162 s is the most for 180.
    expect(attempt({ order: 'wait-for-gap', gapWaitSeconds: 170 })).toBe('gapWaitSeconds');
    expect(attempt({ order: 'wait-for-gap', gapWaitSeconds: 162 })).toBe('accepted');
    expect(attempt({ order: 'wait-for-gap', gapWaitSeconds: 56, retryWindowSeconds: 60 })).toBe(
      'gapWaitSeconds',
    );
    // A maximum event age under the retry window: Lambda would discard the event before it.
    expect(attempt({ order: 'wait-for-gap', maxEventAgeSeconds: 120 })).toBe('maxEventAgeSeconds');
    expect(attempt({ maxEventAgeSeconds: 30 })).toBe('maxEventAgeSeconds');
    expect(attempt({ maxEventAgeSeconds: 86_400 })).toBe('maxEventAgeSeconds');
    expect(attempt({ order: 'wait-for-gap', maxEventAgeSeconds: 3_600 })).toBe('accepted');
    expect(attempt({ consumer: '' })).toBe('consumer');
    expect(attempt({ deadlineMarginMs: -1 })).toBe('deadlineMarginMs');
    expect(attempt({ order: 'newest' as never })).toBe('order');
  });

  it('fails the invocation when the database fails, instead of swallowing it', async () => {
    const broken = connect({ url: db.url.replace(/\/[^/]+$/, '/no_such_database'), max: 1, env: {} });
    try {
      const c = consumer('billing', {}, broken);
      await expect(c.handler(eventFor(1))).rejects.toMatchObject({ code: '3D000' });
      expect(c.calls()).toBe(0);
    } finally {
      await broken.end();
    }
    // A failure inside the transaction (the record table is locked out) rolls everything back.
    await db.sql`alter table inbox_message rename to inbox_message_away`;
    try {
      // Typed as the missing schema it is, the driver's error kept as the cause.
      await expect(consumer('billing').handler(eventFor(1))).rejects.toMatchObject({
        name: 'OutboxSchemaError',
        sqlState: '42P01',
        cause: { code: '42P01' },
      });
    } finally {
      await db.sql`alter table inbox_message_away rename to inbox_message`;
    }
    expect(await applied()).toEqual([]);
  });

  it('rejects an event that is not an outbox envelope', async () => {
    const c = consumer('billing');
    await expect(
      c.handler({ ...eventFor(1), detail: { hello: 'world' } } as unknown as EventBridgeEvent<
        string,
        unknown
      >),
    ).rejects.toThrow(/detail\.metadata/);
  });
});

describe('typed events', () => {
  const OrderPlaced = defineEvent({
    type: 'OrderPlaced',
    source: 'shop.orders',
    schema: z.object({ orderId: z.string(), total: z.number().nonnegative() }),
  });

  it('validates the payload on the producer side, naming the field', async () => {
    await db.sql`truncate outbox, outbox_aggregate`;
    const error = await db.sql
      .begin((tx) =>
        OrderPlaced.enqueue(tx, {
          aggregateType: 'order',
          aggregateId: '1',
          payload: { orderId: '1', total: -5 },
        }),
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('payload.total');
    const ok = await db.sql.begin((tx) =>
      OrderPlaced.enqueue(tx, {
        aggregateType: 'order',
        aggregateId: '1',
        payload: { orderId: '1', total: 5 },
      }),
    );
    const [row] = await db.sql`select event_type, source, payload from outbox where event_id = ${ok.eventId}`;
    expect(row).toEqual({
      event_type: 'OrderPlaced',
      source: 'shop.orders',
      payload: { orderId: '1', total: 5 },
    });
  });

  it('gives the consumer validated data, and fails the invocation on data that does not match', async () => {
    let seen: unknown;
    const handler = inbox(
      { sql: db.sql, consumer: 'typed', schema: OrderPlaced.schema, metrics: false },
      async (_e, ctx: InboxContext<z.output<typeof OrderPlaced.schema>>) => {
        seen = ctx.inbox.data.total;
      },
    );
    await handler(eventFor(1, 'o-9', randomUUID(), { orderId: 'o-9', total: 7 }), context);
    expect(seen).toBe(7);
    // A typed error naming the field, not the schema library's raw error.
    const refused = await handler(eventFor(2, 'o-9', randomUUID(), { orderId: 'o-9' }), context).catch(
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(InboxPayloadError);
    expect(refused).toMatchObject({ name: 'InboxPayloadError', field: 'detail.data.total' });
    expect((refused as Error).message).toMatch(/^detail\.data\.total: /);
    expect(await db.sql`select * from inbox_message where consumer = 'typed'`).toHaveLength(1);
  });
});

describe('inbox on a database without the inbox schema', () => {
  let empty: EmptyDatabase;
  beforeAll(async () => {
    empty = await createEmptyDatabase();
  });
  afterAll(async () => {
    await empty?.drop();
  });

  it.each(['ignore-stale', 'none'] as const)(
    'fails with OutboxSchemaError telling to run `npx outbox migrate` (order %s), not the driver error, and runs no handler',
    async (order) => {
      let calls = 0;
      const handler = inbox({ sql: empty.sql, consumer: 'billing', order, metrics: false }, async () => {
        calls++;
      });
      const error = await handler(eventFor(1), context).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxSchemaError);
      expect(error).toMatchObject({ name: 'OutboxSchemaError', sqlState: '42P01' });
      expect((error as Error).message).toContain('inbox');
      expect((error as Error).message).toContain('npx outbox migrate');
      expect((error as Error).message).toContain('relation "outbox.inbox_');
      expect(calls).toBe(0);
      // Still no inbox tables: nothing was created or recorded on the way.
      expect(await empty.sql`select 1 from pg_tables where tablename like 'inbox%'`).toHaveLength(0);
    },
  );
});
