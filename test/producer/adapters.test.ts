/**
 * The main entry point (postgres.js) and the driver and ORM adapters (`outbox-relay-aws/pg`,
 * `outbox-relay-aws/drizzle`, `outbox-relay-aws/kysely`) against real Postgres: a committed event
 * is published by the relay, a rolled-back one never is, a repeated idempotency key is a no-op,
 * one event without a key costs one function call (`outbox_enqueue`), every path returns the same
 * results, and errors arrive typed.
 */

import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, sql as kyselySql, PostgresDialect } from 'kysely';
import { PostgresJSDialect } from 'kysely-postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Envelope } from '../../shared/platform/index.ts';
import * as viaDrizzle from '../../shared/producer/drizzle.ts';
import {
  enqueueMany as enqueueManyWithPostgres,
  enqueue as enqueueWithPostgres,
  OutboxDeadlockError,
  type OutboxEvent,
  OutboxSchemaError,
  OutboxValidationError,
} from '../../shared/producer/index.ts';
import * as viaKysely from '../../shared/producer/kysely.ts';
import * as viaPg from '../../shared/producer/pg.ts';
import { translateEnqueueError } from '../../shared/producer/sql-errors.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { withDatabase } from '../support/db.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness();
let pool: pg.Pool;
let porsager: postgres.Sql;
let kyselyPg: Kysely<unknown>;
let kyselyPostgresJs: Kysely<unknown>;
beforeAll(() => {
  pool = new pg.Pool({ connectionString: h.db.url, max: 4 });
  porsager = postgres(h.db.url, { max: 2, onnotice: () => {} });
  kyselyPg = new Kysely({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: h.db.url, max: 2 }) }),
  });
  kyselyPostgresJs = new Kysely({
    dialect: new PostgresJSDialect({ postgres: postgres(h.db.url, { max: 2, onnotice: () => {} }) }),
  });
});
afterAll(async () => {
  await pool?.end();
  await porsager?.end({ timeout: 1 });
  await kyselyPg?.destroy();
  await kyselyPostgresJs?.destroy();
});

const event = (aggregateId: string, extra: Partial<OutboxEvent> = {}): OutboxEvent => ({
  type: 'OrderPlaced',
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId,
  payload: { aggregateId },
  ...extra,
});

const count = async () => Number((await h.db.sql<{ n: string }[]>`select count(*) as n from outbox`)[0]?.n);

async function relayed(): Promise<Envelope[]> {
  await runRelay({
    sql: h.db.sql,
    client: testClient(h.bus.url),
    settings: testSettings(),
    untilEmpty: true,
  });
  return h.bus.events.map((e) => e.detail as unknown as Envelope);
}

class RollBack extends Error {}

/**
 * A transaction per adapter: `work` gets what that adapter's `enqueue` takes, and `query` runs
 * plain SQL on it (in that transaction) and returns the rows.
 */
interface Adapter {
  name: string;
  enqueue:
    | typeof enqueueWithPostgres
    | typeof viaPg.enqueue
    | typeof viaDrizzle.enqueue
    | typeof viaKysely.enqueue;
  enqueueMany:
    | typeof enqueueManyWithPostgres
    | typeof viaPg.enqueueMany
    | typeof viaDrizzle.enqueueMany
    | typeof viaKysely.enqueueMany;
  transaction<T>(work: (tx: never) => Promise<T>): Promise<T>;
  query(tx: never, text: string): Promise<Record<string, unknown>[]>;
}

/** Drizzle's rows: node-postgres returns { rows }, postgres.js an array of rows. */
const drizzleRows = (result: unknown) =>
  (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as Record<string, unknown>[];

const adapters: Adapter[] = [
  {
    name: 'postgres.js (the main entry point)',
    enqueue: enqueueWithPostgres,
    enqueueMany: enqueueManyWithPostgres,
    transaction: (work) => porsager.begin((tx) => work(tx as never)) as never,
    query: async (tx, text) => [...(await (tx as postgres.TransactionSql).unsafe(text))],
  },
  {
    name: 'node-postgres PoolClient',
    enqueue: viaPg.enqueue,
    enqueueMany: viaPg.enqueueMany,
    query: async (tx, text) => (await (tx as pg.PoolClient).query(text)).rows,
    async transaction(work) {
      const client = await pool.connect();
      try {
        await client.query('begin');
        const result = await work(client as never);
        await client.query('commit');
        return result;
      } catch (error) {
        await client.query('rollback');
        throw error;
      } finally {
        client.release();
      }
    },
  },
  {
    name: 'Drizzle on node-postgres',
    enqueue: viaDrizzle.enqueue,
    enqueueMany: viaDrizzle.enqueueMany,
    query: async (tx, text) => drizzleRows(await (tx as viaDrizzle.DrizzleExecutor).execute(sql.raw(text))),
    transaction: (work) => drizzlePg(pool).transaction((tx) => work(tx as never)),
  },
  {
    name: 'Drizzle on postgres.js',
    enqueue: viaDrizzle.enqueue,
    enqueueMany: viaDrizzle.enqueueMany,
    query: async (tx, text) => drizzleRows(await (tx as viaDrizzle.DrizzleExecutor).execute(sql.raw(text))),
    transaction: (work) => drizzlePostgresJs(porsager).transaction((tx) => work(tx as never)),
  },
  {
    name: 'Kysely on node-postgres',
    enqueue: viaKysely.enqueue,
    enqueueMany: viaKysely.enqueueMany,
    query: async (trx, text) =>
      (await kyselySql.raw<Record<string, unknown>>(text).execute(trx as viaKysely.KyselyExecutor)).rows,
    transaction: (work) => kyselyPg.transaction().execute((trx) => work(trx as never)),
  },
  {
    name: 'Kysely on postgres.js',
    enqueue: viaKysely.enqueue,
    enqueueMany: viaKysely.enqueueMany,
    query: async (trx, text) =>
      (await kyselySql.raw<Record<string, unknown>>(text).execute(trx as viaKysely.KyselyExecutor)).rows,
    transaction: (work) => kyselyPostgresJs.transaction().execute((trx) => work(trx as never)),
  },
];

describe.each(adapters)('enqueue through $name', (adapter) => {
  const enqueue = adapter.enqueue as (tx: never, e: OutboxEvent) => ReturnType<typeof viaPg.enqueue>;

  it('publishes a committed event', async () => {
    const result = await adapter.transaction((tx) => enqueue(tx, event('c-1')));
    expect(result).toMatchObject({ aggregateId: 'c-1', sequence: '1', duplicate: false });
    const published = await relayed();
    expect(published.map((d) => d.metadata.eventId)).toEqual([result.eventId]);
    expect(published[0]?.data).toEqual({ aggregateId: 'c-1' });
  });

  it('publishes nothing for a rolled-back transaction', async () => {
    await expect(
      adapter.transaction(async (tx) => {
        await enqueue(tx, event('r-1'));
        throw new RollBack('business rule failed');
      }),
    ).rejects.toBeInstanceOf(RollBack);
    expect(await count()).toBe(0);
    expect(await relayed()).toEqual([]);
  });

  it('makes a repeated idempotency key a no-op that says so', async () => {
    const first = await adapter.transaction((tx) =>
      enqueue(tx, event('d-1', { idempotencyKey: 'd-1-placed' })),
    );
    const again = await adapter.transaction((tx) =>
      enqueue(tx, event('d-1', { idempotencyKey: 'd-1-placed', payload: { changed: true } })),
    );
    expect(again).toEqual({ ...first, duplicate: true });
    expect(await count()).toBe(1);
    expect((await relayed()).map((d) => d.metadata.eventId)).toEqual([first.eventId]);
  });

  it('rejects a bad event with a typed error naming the field, before anything is sent', async () => {
    const error = await adapter
      .transaction((tx) => enqueue(tx, event('v-1', { source: 'aws.orders' })))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('source');
    expect(await count()).toBe(0);
  });
});

/**
 * The calls of each enqueue function this session has counted and not yet reported to the
 * cumulative statistics (track_functions = 'pl' must be on when they ran). A backend reports them
 * only when idle outside a transaction, at most once a second, so the figure can include earlier
 * transactions on the same connection: compare two readings taken inside one transaction.
 */
const CALLS_SQL = `select
  coalesce(pg_stat_get_xact_function_calls('outbox_enqueue'::regproc), 0)::int as one,
  coalesce(pg_stat_get_xact_function_calls('outbox_enqueue_many'::regproc), 0)::int as many`;

describe.each(adapters)('the database functions $name calls', (adapter) => {
  const enqueue = adapter.enqueue as (
    tx: never,
    e: OutboxEvent,
    options?: { maxEntryBytes?: number },
  ) => ReturnType<typeof viaPg.enqueue>;
  const enqueueMany = adapter.enqueueMany as (
    tx: never,
    e: OutboxEvent[],
  ) => ReturnType<typeof viaPg.enqueueMany>;

  it('calls outbox_enqueue alone for one event without a key, outbox_enqueue_many for several or a key', async () => {
    // Counted by the server, in this session: no other session's calls, no reporting delay.
    const calls = await adapter.transaction(async (tx) => {
      await adapter.query(tx, "set local track_functions = 'pl'");
      const [before] = await adapter.query(tx, CALLS_SQL);
      const since = async () => {
        const [now] = await adapter.query(tx, CALLS_SQL);
        return {
          one: Number(now?.one) - Number(before?.one),
          many: Number(now?.many) - Number(before?.many),
        };
      };
      await enqueue(tx, event('f-1'));
      const one = await since();
      await enqueueMany(tx, [event('f-1'), event('f-2')]);
      const several = await since();
      await enqueue(tx, event('f-3', { idempotencyKey: 'f-3-placed' }));
      return [one, several, await since()];
    });
    expect(calls).toEqual([
      { one: 1, many: 0 },
      { one: 1, many: 1 },
      { one: 1, many: 2 },
    ]);
    expect(await count()).toBe(4);
  });

  it('returns the same results on both paths, numbering sequence and typeSequence across them', async () => {
    const results = [
      await adapter.transaction((tx) => enqueue(tx, event('n-1'))),
      ...(await adapter.transaction((tx) =>
        enqueueMany(tx, [event('n-1', { type: 'OrderPaid' }), event('n-1'), event('n-2')]),
      )),
      await adapter.transaction((tx) => enqueue(tx, event('n-1', { type: 'OrderPaid' }))),
      await adapter.transaction((tx) =>
        enqueue(tx, event('n-1', { type: 'OrderShipped', idempotencyKey: 'k' })),
      ),
      await adapter.transaction((tx) =>
        enqueue(tx, event('n-1', { type: 'OrderShipped', idempotencyKey: 'k', payload: { changed: true } })),
      ),
      await adapter.transaction((tx) => enqueue(tx, event('n-1', { aggregateId: 7 }))),
    ];
    const rows = await h.db.sql<{ event_id: string; row: string }[]>`
      select event_id, aggregate_id || '/' || sequence || ':' || event_type || type_sequence as row
      from outbox order by id`;
    expect(rows.map((r) => r.row)).toEqual([
      'n-1/1:OrderPlaced1',
      'n-1/2:OrderPaid1',
      'n-1/3:OrderPlaced2',
      'n-2/1:OrderPlaced1',
      'n-1/4:OrderPaid2',
      'n-1/5:OrderShipped1',
      '7/1:OrderPlaced1',
    ]);
    // Each result's eventId is its row's (the duplicate's, the first event's with that key).
    const row = (r: { eventId: string }) => rows.findIndex((x) => x.event_id === r.eventId);
    const result = (at: number, aggregateId: string, sequence: string, duplicate = false) => ({
      eventId: at,
      aggregateType: 'order',
      aggregateId,
      sequence,
      duplicate,
    });
    expect(results.map((r) => ({ ...r, eventId: row(r) }))).toStrictEqual([
      result(0, 'n-1', '1'),
      result(1, 'n-1', '2'),
      result(2, 'n-1', '3'),
      result(3, 'n-2', '1'),
      result(4, 'n-1', '4'),
      result(5, 'n-1', '5'),
      result(5, 'n-1', '5', true),
      result(6, '7', '1'),
    ]);
  });

  it('turns the database’s own refusal of one event into OutboxValidationError naming the field', async () => {
    // JSON.stringify writes 1e-300 in 6 characters, Postgres in 302 (0.000…1): the TypeScript
    // check passes this event, the database function measures Postgres's spelling and refuses it.
    const error = await adapter
      .transaction((tx) =>
        enqueue(tx, event('v-2', { payload: { x: [1e-300, 1e-300, 1e-300] } }), { maxEntryBytes: 600 }),
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('payload');
    expect((error as OutboxValidationError).index).toBeUndefined();
    expect((error as Error).message).toMatch(
      /^payload: makes the EventBridge entry \d+ bytes, over the 600-byte limit$/,
    );
    let cause = (error as Error).cause as { code?: string; cause?: unknown } | undefined;
    if (cause && cause.code === undefined) cause = cause.cause as typeof cause;
    expect(cause?.code).toBe('22023');
    expect(await count()).toBe(0);
  });
});

describe('adapter errors from the database', () => {
  it('turns a deadlock between two pg transactions into OutboxDeadlockError', async () => {
    const a = await pool.connect();
    const b = await pool.connect();
    try {
      await a.query('begin');
      await b.query('begin');
      await viaPg.enqueue(a, event('x'));
      await viaPg.enqueue(b, event('y'));
      const blocked = viaPg.enqueue(a, event('y')).catch((e: unknown) => e);
      // Wait until `a` waits on `b`'s lock, as the server sees it, then close the cycle.
      for (let i = 0; i < 500; i++) {
        const { rows } = await pool.query(
          "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()",
        );
        if (rows[0].n > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      const closing = viaPg.enqueue(b, event('x')).catch((e: unknown) => e);
      const outcomes = await Promise.all([blocked, closing]);
      const errors = outcomes.filter((o) => o instanceof Error);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toBeInstanceOf(OutboxDeadlockError);
      expect((errors[0] as OutboxDeadlockError).retryable).toBe(true);
    } finally {
      await a.query('rollback');
      await b.query('rollback');
      a.release();
      b.release();
    }
    expect(await count()).toBe(0);
  });

  it('turns outbox_enqueue’s own rejection (22023), as pg and Drizzle report it, into OutboxValidationError naming the parameter', async () => {
    // A call the TypeScript checks would have stopped: made directly, to get the database's error.
    const bad = sql`select * from outbox_enqueue(event_type => 'T', source => 's', aggregate_type => 'a',
      aggregate_id => '1', payload => '{}', max_entry_bytes => 10)`;
    const pgError = await pool
      .query(
        "select * from outbox_enqueue(event_type => 'T', source => 's', aggregate_type => 'a', aggregate_id => '1', payload => '{}', max_entry_bytes => 10)",
      )
      .catch((e: unknown) => e);
    const drizzleError = await drizzlePg(pool)
      .execute(bad)
      .catch((e: unknown) => e);
    for (const raw of [pgError, drizzleError]) {
      const typed = translateEnqueueError(raw, [{ aggregateType: 'a', aggregateId: '1' }]);
      expect(typed).toBeInstanceOf(OutboxValidationError);
      expect((typed as OutboxValidationError).field).toBe('payload');
      expect((typed as Error).message).toMatch(
        /^payload: makes the EventBridge entry \d+ bytes, over the 10-byte limit$/,
      );
      expect((typed as Error).cause).toBe(raw);
    }
    expect(await count()).toBe(0);
  });
});

describe('enqueue on a database without the outbox schema', () => {
  // A database as a service has it before anyone ran `outbox migrate`: schema outbox does not
  // exist, so Postgres answers 3F000 (invalid_schema_name) for outbox.outbox_enqueue (one event
  // without a key) or outbox.outbox_enqueue_many (several events, or a key).
  const name = `outbox_test_empty_${randomBytes(6).toString('hex')}`;
  const serverUrl = inject('databaseUrl');
  const url = withDatabase(serverUrl, name);
  const clients: { end(): Promise<unknown> }[] = [];
  beforeAll(async () => {
    const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${name}`);
    await admin.end();
  });
  afterAll(async () => {
    for (const c of clients) await c.end().catch(() => {});
    const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
    await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  });

  const paths: { name: string; enqueue(): Promise<unknown> }[] = [
    {
      name: 'postgres (the main entry point)',
      enqueue: () => {
        const sql = postgres(url, { max: 1, onnotice: () => {} });
        clients.push({ end: () => sql.end({ timeout: 1 }) });
        return sql.begin((tx) => enqueueWithPostgres(tx, event('s-1')));
      },
    },
    {
      name: 'postgres (the main entry point), several events',
      enqueue: () => {
        const sql = postgres(url, { max: 1, onnotice: () => {} });
        clients.push({ end: () => sql.end({ timeout: 1 }) });
        return sql.begin((tx) => enqueueManyWithPostgres(tx, [event('s-1'), event('s-2')]));
      },
    },
    {
      name: 'node-postgres',
      enqueue: async () => {
        const client = new pg.Client({ connectionString: url });
        clients.push(client);
        await client.connect();
        return viaPg.enqueue(client, event('s-1'));
      },
    },
    {
      name: 'Drizzle',
      enqueue: () => {
        const p = new pg.Pool({ connectionString: url, max: 1 });
        clients.push(p);
        return drizzlePg(p).transaction((tx) => viaDrizzle.enqueue(tx, event('s-1')));
      },
    },
    {
      name: 'Kysely',
      enqueue: () => {
        const db = new Kysely<unknown>({
          dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }),
        });
        clients.push({ end: () => db.destroy() });
        return db.transaction().execute((trx) => viaKysely.enqueue(trx, event('s-1')));
      },
    },
  ];

  it.each(paths)('says to run `outbox migrate`, with a typed error, through $name', async (path) => {
    const error = await path.enqueue().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxSchemaError);
    expect((error as OutboxSchemaError).sqlState).toBe('3F000');
    expect((error as Error).message).toMatch(/run `npx outbox migrate`/);
    expect((error as Error).message).toMatch(/schema "outbox" does not exist/);
    // The driver's error stays reachable (Drizzle's wraps it once more).
    let cause = (error as Error).cause as { code?: string; cause?: unknown } | undefined;
    if (cause && cause.code === undefined) cause = cause.cause as typeof cause;
    expect(cause?.code).toBe('3F000');
  });
});
