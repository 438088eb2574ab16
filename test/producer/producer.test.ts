import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { OutboxDeadlockError, OutboxValidationError } from '../../shared/platform/errors.ts';
import { enqueue, enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate outbox, outbox_aggregate, outbox_idempotency_key`;
});

const event = (overrides: Partial<OutboxEvent> = {}): OutboxEvent => ({
  type: 'OrderPlaced',
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId: '42',
  payload: { total: 10 },
  ...overrides,
});

const count = async () => Number((await db.sql<{ n: string }[]>`select count(*) as n from outbox`)[0]?.n);

describe('enqueue', () => {
  it('writes the event only when the business transaction commits', async () => {
    await db.sql`create table if not exists orders (id text primary key)`;
    await expect(
      db.sql.begin(async (tx) => {
        await tx`insert into orders (id) values ('rolled-back')`;
        await enqueue(tx, event({ aggregateId: 'rolled-back' }));
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    expect(await count()).toBe(0);

    await db.sql.begin(async (tx) => {
      await tx`insert into orders (id) values ('committed')`;
      await enqueue(tx, event({ aggregateId: 'committed' }));
    });
    const rows = await db.sql`select aggregate_id, sequence, event_type, source, payload from outbox`;
    expect(rows).toEqual([
      {
        aggregate_id: 'committed',
        sequence: '1',
        event_type: 'OrderPlaced',
        source: 'shop.orders',
        payload: { total: 10 },
      },
    ]);
  });

  it('numbers the events of each aggregate 1, 2, 3… across calls and within one call', async () => {
    await db.sql.begin((tx) => enqueue(tx, event({ aggregateId: 'a' })));
    const results = await db.sql.begin((tx) =>
      enqueueMany(tx, [
        event({ aggregateId: 'a' }),
        event({ aggregateId: 'b' }),
        event({ aggregateId: 'a' }),
      ]),
    );
    expect(results.map((r) => [r.aggregateId, r.sequence])).toEqual([
      ['a', '2'],
      ['b', '1'],
      ['a', '3'],
    ]);
    const stored = await db.sql<{ aggregate_id: string; sequence: string }[]>`
      select aggregate_id, sequence from outbox order by aggregate_id, sequence`;
    expect(stored.map((r) => `${r.aggregate_id}${r.sequence}`)).toEqual(['a1', 'a2', 'a3', 'b1']);
  });

  it('makes a second enqueue with the same idempotency key a no-op that says so', async () => {
    const first = await db.sql.begin((tx) => enqueue(tx, event({ idempotencyKey: 'order-42-placed' })));
    const second = await db.sql.begin((tx) =>
      enqueue(tx, event({ idempotencyKey: 'order-42-placed', payload: { total: 99 } })),
    );
    expect(first.duplicate).toBe(false);
    expect(second).toEqual({ ...first, duplicate: true });
    expect(await count()).toBe(1);
    // No gap: the next event of the aggregate gets sequence 2.
    const next = await db.sql.begin((tx) => enqueue(tx, event()));
    expect(next.sequence).toBe('2');
  });

  it('treats a key repeated inside one call as a duplicate of its first occurrence', async () => {
    const results = await db.sql.begin((tx) =>
      enqueueMany(tx, [event({ idempotencyKey: 'k' }), event({ idempotencyKey: 'k' }), event()]),
    );
    expect(results.map((r) => [r.sequence, r.duplicate])).toEqual([
      ['1', false],
      ['1', true],
      ['2', false],
    ]);
    expect(results[1]?.eventId).toBe(results[0]?.eventId);
    expect(await count()).toBe(2);
  });

  it('lets only one of two concurrent transactions with the same key write, without a sequence gap', async () => {
    const results = await Promise.all(
      [1, 2].map(() =>
        db.sql.begin(async (tx) => {
          const r = await enqueue(tx, event({ idempotencyKey: 'concurrent' }));
          await tx`select pg_sleep(0.05)`;
          return r;
        }),
      ),
    );
    expect(results.map((r) => r.duplicate).sort()).toEqual([false, true]);
    expect(await count()).toBe(1);
    const next = await db.sql.begin((tx) => enqueue(tx, event()));
    expect(next.sequence).toBe('2');
  });

  it('gives two concurrent producers of one aggregate sequences in commit order', async () => {
    // The first transaction takes sequence 1 and holds it; the second waits for it, so it cannot
    // commit first with a lower number (ids from the identity column would not guarantee this).
    let releaseFirst: () => void = () => {};
    const firstMayCommit = new Promise<void>((r) => {
      releaseFirst = r;
    });
    const commits: string[] = [];
    let firstEnqueued: () => void = () => {};
    const firstHasSequence = new Promise<void>((r) => {
      firstEnqueued = r;
    });
    const first = db.sql
      .begin(async (tx) => {
        const r = await enqueue(tx, event({ aggregateId: 'race' }));
        firstEnqueued();
        await firstMayCommit;
        return r;
      })
      .then((r) => {
        commits.push(r.sequence);
        return r;
      });
    await firstHasSequence;
    const second = db.sql
      .begin((tx) => enqueue(tx, event({ aggregateId: 'race' })))
      .then((r) => {
        commits.push(r.sequence);
        return r;
      });
    // Wait until the second producer is blocked on the first one's lock, as seen by the server.
    for (let i = 0; i < 200; i++) {
      const [waiting] =
        await db.sql`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`;
      if ((waiting?.n ?? 0) > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(commits).toEqual([]); // the second producer is waiting on the first
    releaseFirst();
    await Promise.all([first, second]);
    expect(commits).toEqual(['1', '2']);
  });

  it('treats concurrent enqueues with one idempotency key on a plain pool as duplicates too', async () => {
    const results = await Promise.all(
      [1, 2, 3, 4].map(() => enqueue(db.sql, event({ idempotencyKey: 'pool-key' }))),
    );
    expect(results.filter((r) => !r.duplicate)).toHaveLength(1);
    expect(await count()).toBe(1);
  });

  it('keeps concurrent transactions under a small pool on separate connections', async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        db.sql.begin((tx) => enqueue(tx, event({ aggregateId: `pool-${i % 3}` }))),
      ),
    );
    expect(results).toHaveLength(20);
    const perAggregate = await db.sql<{ aggregate_id: string; n: string; max: string }[]>`
      select aggregate_id, count(*) as n, max(sequence) as max from outbox group by aggregate_id order by aggregate_id`;
    for (const row of perAggregate) expect(row.max).toBe(row.n);
  });
});

/** Resolves once `n` sessions of this database wait on a lock, as the server sees it. */
async function lockWaiters(n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const [row] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where wait_event_type = 'Lock' and datname = current_database()`;
    if ((row?.n ?? 0) >= n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`fewer than ${n} sessions ever waited on a lock`);
}

describe('enqueue locks', () => {
  it('turns two transactions that enqueue for two aggregates in opposite orders into one typed, retryable error, and the other commits', async () => {
    let t1First: () => void = () => {};
    const t1HasFirst = new Promise<void>((r) => {
      t1First = r;
    });
    let t2First: () => void = () => {};
    const t2HasFirst = new Promise<void>((r) => {
      t2First = r;
    });
    // T1: order/1 then order/2. T2: order/2 then order/1. Each holds its first aggregate's counter
    // row until it ends, so the second enqueues wait on each other: Postgres picks a victim (40P01).
    const t1 = db.sql
      .begin(async (tx) => {
        await enqueue(tx, event({ aggregateId: '1', payload: { by: 't1' } }));
        t1First();
        await t2HasFirst;
        await enqueue(tx, event({ aggregateId: '2', payload: { by: 't1' } }));
        return 't1';
      })
      .catch((error: unknown) => error);
    const t2 = db.sql
      .begin(async (tx) => {
        await t1HasFirst;
        await enqueue(tx, event({ aggregateId: '2', payload: { by: 't2' } }));
        t2First();
        await lockWaiters(1); // T1 now waits for order/2
        await enqueue(tx, event({ aggregateId: '1', payload: { by: 't2' } }));
        return 't2';
      })
      .catch((error: unknown) => error);
    const outcomes = await Promise.all([t1, t2]);

    const failed = outcomes.filter((o) => typeof o !== 'string');
    const committed = outcomes.filter((o) => typeof o === 'string');
    expect(failed).toHaveLength(1);
    expect(committed).toHaveLength(1);
    const error = failed[0] as OutboxDeadlockError;
    expect(error).toBeInstanceOf(OutboxDeadlockError);
    expect(error.name).toBe('OutboxDeadlockError');
    expect(error.retryable).toBe(true);
    expect(error.sqlState).toBe('40P01');
    expect(error.message).toMatch(/deadlock/i);
    expect(error.message).toMatch(/opposite order|different order/i);
    expect(error.message).toMatch(/retry the (whole )?transaction/i);
    expect((error.cause as { code?: string }).code).toBe('40P01');

    // Only the survivor's two events exist, numbered 1 on each aggregate.
    const rows = await db.sql<{ aggregate_id: string; sequence: string; by: string }[]>`
      select aggregate_id, sequence, payload->>'by' as by from outbox order by aggregate_id`;
    expect(rows).toEqual([
      { aggregate_id: '1', sequence: '1', by: committed[0] },
      { aggregate_id: '2', sequence: '1', by: committed[0] },
    ]);
    // Retrying the victim's whole transaction succeeds and continues the numbering.
    const retried = await db.sql.begin((tx) =>
      enqueueMany(tx, [event({ aggregateId: '1' }), event({ aggregateId: '2' })]),
    );
    expect(retried.map((r) => r.sequence)).toEqual(['2', '2']);
  });
});

function nested(depth: number): Record<string, unknown> {
  let value: Record<string, unknown> = { leaf: true };
  for (let i = 0; i < depth; i++) value = { a: value };
  return value;
}

describe('enqueue validation', () => {
  const big = 'x'.repeat(1_048_576);
  const cases: [string, Partial<OutboxEvent> & Record<string, unknown>, string][] = [
    ['a missing type', { type: undefined }, 'type'],
    ['an empty type', { type: '  ' }, 'type'],
    ['a DetailType over 128 characters', { type: 't'.repeat(129) }, 'type'],
    ['a missing source', { source: undefined }, 'source'],
    ['a source starting with aws.', { source: 'aws.orders' }, 'source'],
    ['a missing aggregateType', { aggregateType: undefined }, 'aggregateType'],
    ['an empty aggregateId', { aggregateId: '' }, 'aggregateId'],
    ['a payload that is an array', { payload: [1, 2] as unknown as Record<string, unknown> }, 'payload'],
    ['a payload that is null', { payload: null as unknown as Record<string, unknown> }, 'payload'],
    ['a NUL character in a payload string', { payload: { note: 'a\u0000b' } }, 'payload.note'],
    ['a NUL character in a payload key', { payload: { 'a\u0000': 1 } }, 'payload["a\\u0000"]'],
    ['a lone surrogate', { payload: { items: [{ name: 'bad \ud800' }] } }, 'payload.items[0].name'],
    ['a BigInt', { payload: { n: 10n } }, 'payload.n'],
    ['a NaN', { payload: { n: Number.NaN } }, 'payload.n'],
    ['an entry larger than the bus accepts', { payload: { big } }, 'payload'],
    ['an empty idempotency key', { idempotencyKey: '' }, 'idempotencyKey'],
    ['a payload that is a Date', { payload: new Date() as unknown as Record<string, unknown> }, 'payload'],
    ['a Map, which JSON turns into {}', { payload: { tags: new Map([['a', 1]]) } }, 'payload.tags'],
    ['a toJSON() that returns a NUL', { payload: { v: { toJSON: () => 'a\u0000' } } }, 'payload.v'],
    ['an integer beyond int64', { payload: { n: 1e19 } }, 'payload.n'],
    ['nesting deeper than 1000 levels', { payload: nested(1_005) }, 'payload'],
  ];

  it.each(cases)(
    'rejects %s with a typed error naming the field, writing nothing',
    async (_name, overrides, field) => {
      const bad = { ...event(), ...overrides } as OutboxEvent;
      let caught: unknown;
      await db.sql.begin(async (tx) => {
        try {
          await enqueue(tx, bad);
        } catch (error) {
          caught = error;
        }
        // The transaction is still usable: validation failed before any statement was sent.
        await tx`select 1`;
      });
      expect(caught).toBeInstanceOf(OutboxValidationError);
      expect((caught as OutboxValidationError).field.startsWith(field)).toBe(true);
      expect((caught as Error).message).toContain(field);
      expect(await count()).toBe(0);
    },
  );

  it('refuses a misspelt field (idempotency_key) instead of ignoring it, writing nothing', async () => {
    const misspelt = { ...event(), idempotency_key: 'k1' } as OutboxEvent;
    for (let i = 0; i < 2; i++) {
      const error = await db.sql.begin((tx) => enqueue(tx, misspelt)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe('idempotency_key');
      expect((error as Error).message).toContain('is not a known field');
      expect((error as Error).message).toContain('idempotencyKey');
      expect((error as Error).message).toMatch(/did you mean idempotencyKey\?/);
    }
    expect(await count()).toBe(0);
  });

  it('suggests the field for a case variant (AggregateId) and names the position in enqueueMany', async () => {
    const { aggregateId, ...rest } = event();
    const error = await db.sql
      .begin((tx) =>
        enqueueMany(tx, [event(), { ...rest, AggregateId: aggregateId } as unknown as OutboxEvent]),
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).index).toBe(1);
    expect((error as Error).message).toMatch(/^events\[1\]\.AggregateId: is not a known field/);
    expect((error as Error).message).toMatch(/did you mean aggregateId\?/);
    expect(await count()).toBe(0);
  });

  it('accepts known optional fields set to undefined', async () => {
    await db.sql.begin((tx) =>
      enqueue(tx, { ...event(), source: 'shop.orders', idempotencyKey: undefined, traceHeader: undefined }),
    );
    expect(await count()).toBe(1);
  });

  it('says an aggregateId may be a string or a safe integer when it is neither', async () => {
    const error = await db.sql
      .begin((tx) => enqueue(tx, event({ aggregateId: {} as unknown as string })))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as Error).message).toBe('aggregateId: must be a string or a safe integer');
    const other = await db.sql
      .begin((tx) => enqueue(tx, event({ aggregateType: 7 as unknown as string })))
      .catch((e: unknown) => e);
    expect((other as Error).message).toBe('aggregateType: must be a string');
    expect(await count()).toBe(0);
  });

  it('names the position of the bad event in a many-events call and writes none of them', async () => {
    const error = await db.sql
      .begin((tx) => enqueueMany(tx, [event(), event({ source: 'aws.ec2' })]))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).index).toBe(1);
    expect((error as Error).message).toMatch(/^events\[1\]\.source/);
    expect(await count()).toBe(0);
  });

  it('honours a smaller entry limit (accounts still on 256 KiB)', async () => {
    const payload = { text: '日本'.repeat(50_000) }; // 300,000 bytes of UTF-8, 100,000 characters
    await expect(
      db.sql.begin((tx) => enqueue(tx, event({ payload }), { maxEntryBytes: 262_144 })),
    ).rejects.toThrow(/over the 262144-byte limit/);
    await db.sql.begin((tx) => enqueue(tx, event({ payload })));
    expect(await count()).toBe(1);
  });

  it('takes the source from defaultSource when the event has none', async () => {
    await db.sql.begin((tx) => enqueue(tx, event({ source: undefined }), { defaultSource: 'shop.default' }));
    const [row] = await db.sql`select source from outbox`;
    expect(row?.source).toBe('shop.default');
  });
});
