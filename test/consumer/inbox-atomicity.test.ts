/**
 * A consumer invocation is all or nothing (docs/guarantees.md#what-is-promised), whatever the handler catches, however the
 * invocation times out and whatever happens to its connection; a warm container recovers on the
 * next invocation. Each test is one failure window of the inbox middleware (issue 12, items 6–9),
 * asserted on the effect rows and inbox records that were committed.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { Context, EventBridgeEvent } from 'aws-lambda';
import postgres from 'postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery as eventBridgeDelivery } from '../../dev/delivery.ts';
import { type InboxContext, type InboxOptions, inbox } from '../../shared/consumer/index.ts';
import { ConnectionPool, connect, type Sql } from '../../shared/platform/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
/** A separate client for killing sessions, so that it never shares a connection with the consumer. */
let admin: Sql;
beforeAll(async () => {
  db = await createTestDatabase({ max: 4 });
  admin = postgres(db.url, { max: 1, onnotice: () => {} });
  await db.sql`create table effect (id text primary key, event_id text not null)`;
});
afterAll(async () => {
  await admin?.end({ timeout: 5 });
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, effect`;
});

/** What {@link within} throws: told apart from the failures the tests expect. */
class DeadlineExceeded extends Error {
  override name = 'DeadlineExceeded';
}

/** Rejects when `promise` has not settled after `ms`: every wait in these tests has a deadline. */
async function within<T>(ms: number, promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceeded(`${what}: still waiting after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** The error an invocation failed with, within `ms`; a hang or a success fails the test. */
async function failure(ms: number, invocation: Promise<unknown>, what: string): Promise<Error> {
  const outcome = await within(ms, invocation, what).then(
    (value) => ({ value }),
    (error: Error) => ({ error }),
  );
  if (!('error' in outcome))
    throw new Error(`${what}: succeeded (${JSON.stringify(outcome.value)}), expected to fail`);
  if (outcome.error instanceof DeadlineExceeded) throw outcome.error;
  return outcome.error;
}

/** Polls `check` every 20 ms until it returns true, for at most `ms`. */
async function until(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what}: not true after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function delivery(eventId = randomUUID(), sequence = 1): EventBridgeEvent<string, unknown> {
  return eventBridgeDelivery({ metadata: { eventId, sequence } });
}

type Handler = (ctx: InboxContext) => Promise<unknown>;

/** A consumer with the inbox; `body` is the handler, given the invocation's context. */
function consumer(
  sql: Sql | ConnectionPool,
  body: Handler,
  options: Partial<InboxOptions<Record<string, unknown>>> = {},
) {
  const handler = inbox({ sql, consumer: 'billing', metrics: false, ...options }, async (_event, ctx) =>
    body(ctx),
  );
  return (event: EventBridgeEvent<string, unknown>, context: Context = lambdaContext(10_000)) =>
    handler(event, context);
}

/** Writes the effect of an event: one row keyed by its event id. */
const applyEffect = (ctx: InboxContext) =>
  ctx.inbox
    .tx`insert into effect (id, event_id) values (${ctx.inbox.metadata.eventId}, ${ctx.inbox.metadata.eventId})`;

async function committed(eventId: string) {
  const [row] = await db.sql<{ effects: number; records: number }[]>`
    select (select count(*)::int from effect where event_id = ${eventId}) as effects,
           (select count(*)::int from inbox_message where message_key = ${eventId}) as records`;
  return row;
}

async function backendAlive(pid: number): Promise<boolean> {
  const rows = await admin`select 1 from pg_stat_activity where pid = ${pid}`;
  return rows.length > 0;
}

describe('inbox: an invocation is all or nothing', () => {
  it('commits nothing of an invocation that timed out, and its retry applies the effect once', async () => {
    // The issue's reproduction: the handler waits 400 ms and then writes, with 200 ms left.
    let settled!: Promise<unknown>;
    const slow = consumer(db.sql, (ctx) => {
      settled = (async () => {
        await sleep(400);
        await applyEffect(ctx);
      })();
      return settled;
    });
    const eventId = randomUUID();
    const timedOut = await failure(
      5_000,
      slow(delivery(eventId), lambdaContext(200)),
      'timed-out invocation',
    );
    expect(timedOut).toMatchObject({ name: 'InboxAbortedError', reason: 'deadline' });
    // The abandoned handler (if it ran at all) goes on; wait until it has finished, one way or the other.
    await within(
      5_000,
      Promise.resolve(settled).catch(() => undefined),
      'abandoned handler',
    );
    expect(await committed(eventId)).toEqual({ effects: 0, records: 0 });

    const retry = consumer(db.sql, applyEffect);
    await within(5_000, retry(delivery(eventId)), 'retry');
    expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
  });

  it('refuses every write of a handler that outlives its deadline, even one it catches', async () => {
    // The handler starts in time, then is abandoned while it waits: none of its later writes,
    // caught or not, may reach the database, on this connection or any other.
    const outcomes: string[] = [];
    let settled!: Promise<unknown>;
    const slow = consumer(db.sql, (ctx) => {
      settled = (async () => {
        await sleep(1_200);
        for (let i = 0; i < 2; i++) {
          await ctx.inbox
            .tx`insert into effect (id, event_id) values (${`late-${i}`}, ${ctx.inbox.metadata.eventId})`.then(
            () => outcomes.push('written'),
            (e: Error) => outcomes.push(e.name),
          );
        }
      })();
      return settled;
    });
    const eventId = randomUUID();
    const abandoned = await failure(
      5_000,
      slow(delivery(eventId), lambdaContext(1_000)),
      'abandoned invocation',
    );
    // The inbox gave up 500 ms before the deadline, rolled back, and failed the invocation.
    expect(abandoned).toMatchObject({ name: 'InboxAbortedError', reason: 'deadline' });
    await within(5_000, settled, 'abandoned handler');
    expect(outcomes).toEqual(['InboxAbortedError', 'InboxAbortedError']);
    expect(await committed(eventId)).toEqual({ effects: 0, records: 0 });
    const [late] = await db.sql<{ n: number }[]>`select count(*)::int as n from effect`;
    expect(late?.n).toBe(0);
  });

  it('ends the transaction before the invocation returns when a statement is still running at the deadline', async () => {
    // Without cancelling it, the ROLLBACK would queue behind the statement, and a frozen container
    // would keep the transaction (and the inbox record's lock) open.
    const c = consumer(db.sql, async (ctx) => {
      await applyEffect(ctx);
      await ctx.inbox.tx`select pg_sleep(5)`;
    });
    const eventId = randomUUID();
    await failure(5_000, c(delivery(eventId), lambdaContext(1_500)), 'invocation');
    const open = await admin<{ state: string }[]>`
      select state from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid()
        and (state like 'idle in transaction%' or (state = 'active' and query like '%pg_sleep(5)%'))`;
    expect(open).toEqual([]);
    expect(await committed(eventId)).toEqual({ effects: 0, records: 0 });
  });

  for (const reconnected of [true, false]) {
    it(`fails the invocation and commits nothing when the connection drops while the handler runs (${reconnected ? 'after' : 'before'} the pool reconnected it)`, async () => {
      // The issue's reproduction: one connection; a pool query queued behind the invocation makes
      // the driver reconnect the same connection object once the server ends the session.
      const sql = connect({ url: db.url, max: 1, env: {} });
      try {
        let queued: Promise<string> | undefined;
        const c = consumer(sql, async (ctx) => {
          const [row] = await ctx.inbox.tx<{ pid: number }[]>`select pg_backend_pid() as pid`;
          const pid = row?.pid ?? 0;
          queued = sql`select 1`.then(
            () => 'ok',
            () => 'failed',
          );
          await admin`select pg_terminate_backend(${pid})`;
          if (reconnected) {
            await until(async () => !(await backendAlive(pid)), 5_000, 'terminated backend gone');
            await within(5_000, queued, 'queued pool query');
          }
          await applyEffect(ctx);
        });
        const eventId = randomUUID();
        const error = await failure(10_000, c(delivery(eventId)), 'invocation');
        // Refused by the middleware once it saw the close, or failed on the dying connection.
        if (reconnected) expect(error).toMatchObject({ name: 'InboxAbortedError', reason: 'connection' });
        await within(10_000, Promise.resolve(queued), 'queued pool query');
        expect(await committed(eventId)).toEqual({ effects: 0, records: 0 });

        // The retry, on the same warm pool, applies it once.
        await within(10_000, consumer(sql, applyEffect)(delivery(eventId)), 'retry');
        expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
      } finally {
        await within(10_000, sql.end({ timeout: 5 }), 'sql.end');
      }
    });
  }

  it('fails the invocation when the handler catches a failed statement, committing nothing', async () => {
    const c = consumer(db.sql, async (ctx) => {
      await applyEffect(ctx);
      try {
        await applyEffect(ctx); // duplicate key: the transaction is now aborted
      } catch {
        // the handler swallows it and reports success
      }
    });
    const eventId = randomUUID();
    const error = await failure(5_000, c(delivery(eventId)), 'invocation');
    expect(error.name).toBe('InboxCommitError');
    expect(error.cause).toMatchObject({ code: '23505' }); // the statement the handler swallowed
    expect(await committed(eventId)).toEqual({ effects: 0, records: 0 });

    await within(5_000, consumer(db.sql, applyEffect)(delivery(eventId)), 'retry');
    expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
  });

  it('commits what a handler kept after recovering from a failed statement with a savepoint', async () => {
    // The legitimate way to survive a failed statement inside the transaction still works.
    const c = consumer(db.sql, async (ctx) => {
      await applyEffect(ctx);
      await ctx.inbox.tx
        .savepoint(
          (sp) => sp`insert into effect (id, event_id) values (${ctx.inbox.metadata.eventId}, 'dup')`,
        )
        .catch(() => undefined);
      await ctx.inbox
        .tx`insert into effect (id, event_id) values (${`${ctx.inbox.metadata.eventId}-2`}, ${ctx.inbox.metadata.eventId})`;
    });
    const eventId = randomUUID();
    await within(5_000, c(delivery(eventId)), 'invocation');
    expect(await committed(eventId)).toEqual({ effects: 2, records: 1 });
  });

  it('refuses a statement the handler did not await once it has returned', async () => {
    let late: Promise<string> | undefined;
    const c = consumer(db.sql, async (ctx) => {
      await applyEffect(ctx);
      const { eventId } = ctx.inbox.metadata;
      late = sleep(50).then(() =>
        ctx.inbox.tx`insert into effect (id, event_id) values (${`${eventId}-late`}, ${eventId})`.then(
          () => 'written',
          (e: Error) => e.name,
        ),
      );
    });
    const eventId = randomUUID();
    await within(5_000, c(delivery(eventId)), 'invocation');
    expect(await within(5_000, Promise.resolve(late), 'late statement')).toBe('InboxAbortedError');
    expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
  });

  for (const noticed of [true, false]) {
    it(`recovers on the same warm pool after the session dies just before COMMIT (${noticed ? 'after' : 'before'} the driver noticed)`, async () => {
      // A ConnectionPool, as the docs ask: the invocation that lost its connection replaces it.
      const pool = new ConnectionPool(() => connect({ url: db.url, max: 1, env: {} }));
      try {
        const dies = consumer(pool, async (ctx) => {
          await applyEffect(ctx);
          const [row] = await ctx.inbox.tx<{ pid: number }[]>`select pg_backend_pid() as pid`;
          const pid = row?.pid ?? 0;
          await admin`select pg_terminate_backend(${pid})`;
          if (noticed) await until(async () => !(await backendAlive(pid)), 5_000, 'terminated backend gone');
        });
        const first = randomUUID();
        const outcome = await within(10_000, dies(delivery(first)), 'invocation whose session died').then(
          () => 'succeeded',
          () => 'failed',
        );
        // All or nothing: a COMMIT that raced ahead of the termination may have committed both.
        expect(await committed(first)).toEqual(
          outcome === 'failed' ? { effects: 0, records: 0 } : { effects: 1, records: 1 },
        );
        if (noticed) expect(outcome).toBe('failed');

        // The next invocations on the same container, and plain queries on its pool, work.
        const healthy = consumer(pool, applyEffect);
        await within(10_000, healthy(delivery(first)), 'retry of the event');
        const second = randomUUID();
        await within(10_000, healthy(delivery(second)), 'next event');
        expect(await within(5_000, pool.sql`select 1 as one`, 'plain pool query')).toEqual([{ one: 1 }]);
        expect(await committed(first)).toEqual({ effects: 1, records: 1 });
        expect(await committed(second)).toEqual({ effects: 1, records: 1 });
      } finally {
        await within(10_000, pool.end(5), 'pool.end');
      }
    });
  }
});

describe('inbox: it owns its transaction, whatever the rest of the chain does', () => {
  const idleInTransaction = () =>
    admin<{ state: string }[]>`
      select state from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid() and state like 'idle in transaction%'`;

  it('commits before a middy middleware whose `after` returns a value (a response shaper) ends the chain', async () => {
    // With the inbox as a middy middleware, the shaper's early return skipped the inbox's `after`:
    // the invocation succeeded with no effect and no record, its transaction idle in transaction.
    const handler = middy<EventBridgeEvent<string, unknown>, unknown>()
      .use({ after: async () => ({ statusCode: 200 }) })
      .handler(
        inbox({ sql: db.sql, consumer: 'billing', metrics: false }, async (_e, ctx) => applyEffect(ctx)),
      );
    const eventId = randomUUID();
    expect(await within(5_000, handler(delivery(eventId), lambdaContext(10_000)), 'invocation')).toEqual({
      statusCode: 200,
    });
    expect(await committed(eventId)).toEqual({ effects: 1, records: 1 });
    expect(await idleInTransaction()).toEqual([]);
  });

  it('has rolled back before a middy `onError` that returns a value handles the error, and holds no lock after', async () => {
    // Before, the handled error skipped the inbox's `onError`: the transaction stayed open holding
    // the aggregate's lock, and the next event of the aggregate waited for it until its deadline.
    const handler = middy<EventBridgeEvent<string, unknown>, unknown>()
      .use({ onError: async () => ({ handled: true }) })
      .handler(
        inbox(
          { sql: db.sql, consumer: 'billing', order: 'ignore-stale', metrics: false },
          async (_e, ctx) => {
            await applyEffect(ctx);
            throw new Error('handler failed');
          },
        ),
      );
    const first = randomUUID();
    expect(await within(5_000, handler(delivery(first, 1), lambdaContext(10_000)), 'invocation')).toEqual({
      handled: true,
    });
    expect(await committed(first)).toEqual({ effects: 0, records: 0 });
    expect(await idleInTransaction()).toEqual([]);
    const second = randomUUID();
    await within(
      2_000,
      consumer(db.sql, applyEffect, { order: 'ignore-stale' })(delivery(second, 2)),
      'next event',
    );
    expect(await committed(second)).toEqual({ effects: 1, records: 1 });
  });
});

describe("inbox: the deadline bounds the inbox's own statements", () => {
  it('cancels a bookkeeping statement blocked by another transaction and fails deadlineMarginMs before the Lambda deadline', async () => {
    // Another transaction holds the lock the inbox's order bookkeeping needs.
    const blocker = postgres(db.url, { max: 1, onnotice: () => {} });
    const release = Promise.withResolvers<void>();
    const inserted = Promise.withResolvers<void>();
    const held = blocker.begin(async (tx) => {
      await tx`insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence)
               values ('billing', 'order', 'o-1', '', '', 0)`;
      inserted.resolve();
      await release.promise;
    });
    try {
      // The row is written, uncommitted: the inbox's insert of the same row waits for this transaction.
      await within(5_000, inserted.promise, 'blocker holds its lock');
      const c = consumer(db.sql, applyEffect, { order: 'ignore-stale' });
      const started = Date.now();
      const error = await failure(
        5_000,
        c(delivery(randomUUID(), 1), lambdaContext(2_000)),
        'blocked invocation',
      );
      const took = Date.now() - started;
      expect(error).toMatchObject({ name: 'InboxAbortedError', reason: 'deadline' });
      // It gave up at 2 000 − 500 ms, not at the Lambda deadline (2 000 ms): 300 ms of slack for a loaded machine.
      expect(took).toBeLessThan(1_800);
      // And its statement no longer waits: it was cancelled, not left queued behind the lock.
      await until(
        async () =>
          (
            await admin`select 1 from pg_stat_activity
                        where datname = current_database() and wait_event_type = 'Lock'`
          ).length === 0,
        1_000,
        'no statement waits for the lock',
      );
    } finally {
      release.resolve();
      await held.catch(() => undefined);
      await blocker.end({ timeout: 5 });
    }
  });
});
