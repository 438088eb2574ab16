/**
 * Behind a transaction pooler (RDS Proxy, PgBouncer, Supabase, Neon) a client must not pipeline,
 * prepare named statements or send session settings. The rehearsal (`npm run rehearse`) runs the
 * functions through PgBouncer; these tests pin down the connection settings against Postgres itself.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalBus } from '../../shared/local/bus.ts';
import { connect, oneStatementPerConnection } from '../../shared/platform/index.ts';
import { enqueue } from '../../shared/producer/index.ts';
import { createRelay } from '../../shared/relay/index.ts';
import { getStatus } from '../../shared/relay/operations/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { testClient, testSettings } from '../support/relay.ts';
import { startStallProxy } from '../support/stall-proxy.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

describe('one statement per connection (transaction pooler mode)', () => {
  it('never writes a statement on a connection before the previous one there was answered', async () => {
    const events: string[] = [];
    const raw = postgres(db.url, {
      max: 1,
      prepare: false,
      onnotice: () => {},
      debug: (_connection, query) => {
        if (query.includes('pg_sleep')) events.push('sent sleep');
        if (query.includes('as n')) events.push('sent other');
      },
    });
    const sql = oneStatementPerConnection(raw, 1);
    try {
      await Promise.all([
        sql`select pg_sleep(0.2)`.then(() => events.push('answered sleep')),
        sql`select ${1}::int as n`.then(() => events.push('answered other')),
        sql.begin(async (tx) => tx`select 1`).then(() => events.push('answered transaction')),
      ]);
    } finally {
      await raw.end();
    }
    const sentOther = events.indexOf('sent other');
    expect(sentOther).toBeGreaterThan(events.indexOf('answered sleep'));
    expect(events.filter((e) => e.startsWith('answered'))).toHaveLength(3);
  });

  it('rejects a statement cancelled while it waits in the gate with 57014, never sends it, and frees its turn', async () => {
    const sent: string[] = [];
    const raw = postgres(db.url, {
      max: 1,
      prepare: false,
      onnotice: () => {},
      debug: (_connection, query) => {
        sent.push(query);
      },
    });
    const sql = oneStatementPerConnection(raw, 1);
    try {
      const sleeping = sql`select pg_sleep(0.3) as slept`.then(() => 'slept');
      const waiting = sql`select 'in the gate' as waited`;
      const outcome = waiting.then(
        () => 'answered',
        (error: { code?: string }) => error.code,
      );
      // Let both be handed to the gate: the sleep holds the one slot, the other waits.
      await new Promise((resolve) => setTimeout(resolve, 50));
      await waiting.cancel();
      expect(await outcome).toBe('57014');
      expect(await sleeping).toBe('slept');
      const [after] = await sql<{ n: number }[]>`select ${7}::int as n`;
      expect(after?.n).toBe(7);
      expect(sent.filter((q) => q.includes('in the gate'))).toEqual([]);
      expect(sent.some((q) => q.includes('pg_sleep'))).toBe(true);
    } finally {
      await raw.end();
    }
  });

  it('runs concurrent statements, a transaction and a failing statement on a one-connection pool, each with its own answer', async () => {
    const sql = connect({ url: db.url, max: 1, env: { OUTBOX_DB_POOLER: 'transaction' } });
    try {
      const results = await Promise.allSettled([
        sql`select pg_sleep(0.05)`.then(() => 'slept'),
        getStatus(sql).then(() => 'status'),
        enqueue(sql, { type: 'T', source: 's', aggregateType: 'p', aggregateId: '1', payload: {} }).then(
          () => 'enqueued',
        ),
        sql`select 1/0`.then(() => 'divided'),
      ]);
      expect(
        results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as { code: string }).code)),
      ).toEqual(['slept', 'status', 'enqueued', '22012']);
    } finally {
      await sql.end();
    }
  });

  it('sends no statement_timeout and prepares no named statement behind a pooler (PgBouncer refuses the one, RDS Proxy pins on the other)', async () => {
    const sql = connect({ url: db.url, max: 1, env: { OUTBOX_DB_POOLER: 'transaction' } });
    try {
      await getStatus(sql);
      const [row] = await sql<{ timeout: string; prepared: number; app: string }[]>`
        select current_setting('statement_timeout') as timeout,
               (select count(*)::int from pg_prepared_statements) as prepared,
               current_setting('application_name') as app`;
      expect(row).toEqual({ timeout: '0', prepared: 0, app: 'outbox' });
    } finally {
      await sql.end();
    }
    const direct = connect({ url: db.url, max: 1, env: {} });
    try {
      const [row] = await direct<
        { timeout: string }[]
      >`select current_setting('statement_timeout') as timeout`;
      expect(row?.timeout).toBe('15s');
    } finally {
      await direct.end();
    }
  });

  it('relays behind a pooler without a session setting: no SET, no set_config (RDS Proxy pins on both)', async () => {
    const bus = await startLocalBus();
    const url = new URL(db.url);
    const proxy = await startStallProxy({ host: url.hostname, port: Number(url.port || 5432) });
    const relay = createRelay({
      url: proxy.urlFor(db.url),
      env: { OUTBOX_DB_POOLER: 'transaction' },
      client: testClient(bus.url),
      settings: testSettings(),
    });
    try {
      await db.sql`truncate outbox, outbox_aggregate`;
      await db.sql.begin((tx) =>
        enqueue(tx, { type: 'T', source: 's', aggregateType: 'a', aggregateId: 'pooled', payload: {} }),
      );
      const result = await relay.run({ untilEmpty: true, maxConsecutiveErrors: 1 });
      expect(result.published).toBe(1);
      expect(proxy.sent).toContain('lease_token');
      // A statement that starts with SET (after the message header's NUL), or set_config anywhere.
      expect(proxy.sent).not.toMatch(/\0\s*set\s|set_config/i);
    } finally {
      await relay.close();
      await proxy.close();
      await bus.close();
    }
  });
});
