/**
 * Migration 024 on an install of the release before it: everything in `public`, migrated by that
 * release's `outbox migrate` (history in public.outbox_migrations), with pending events, a dead
 * letter, an idempotency key and inbox records, and a producer role of that release. One
 * `outbox migrate` moves it into schema `outbox` in place: the data stays, the relay publishes the
 * pending events, this release's producers enqueue, and the previous release's unqualified calls
 * keep working through the forwarding wrappers (dropped a release later).
 */
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { connect, OUTBOX_SEARCH_PATH, type Sql } from '../../shared/platform/index.ts';
import { MIGRATIONS_DIR, migrate } from '../../shared/platform/migrate.ts';
import { enqueue } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { applyMigrationFiles, createEmptyDatabase, type EmptyDatabase } from '../support/db.ts';
import { testClient, testSettings } from '../support/relay.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';

let db: EmptyDatabase;
let admin: Sql;
let bus: LocalBus;
let testRoles: TestRoles;
const oldProducer = `old_producer_${randomBytes(4).toString('hex')}`;
const pools: Sql[] = [];

beforeAll(async () => {
  db = await createEmptyDatabase({ legacyPublic: true });
  bus = await startLocalBus();
  // The release before 024: its files applied in the admin's current schema (public), and
  // node-pg-migrate's history of them in public.outbox_migrations.
  await applyMigrationFiles(db.sql, '001', '023');
  await db.sql.unsafe(`create table public.outbox_migrations (id serial primary key, name varchar(255) not null,
    run_on timestamp not null)`);
  const names = readdirSync(MIGRATIONS_DIR)
    .filter((f) => f.endsWith('.sql') && f.slice(0, 3) <= '023')
    .sort()
    .map((f) => f.replace(/\.sql$/, ''));
  for (const name of names)
    await db.sql`insert into public.outbox_migrations (name, run_on) values (${name}, now())`;
  // That release's producer role: USAGE on public, EXECUTE on the two entry points.
  await db.sql.unsafe(`create role ${oldProducer} login password 'old';
    grant usage on schema public to ${oldProducer};
    grant execute on function public.outbox_enqueue(text, text, text, text, jsonb, text, text, integer),
      public.outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer) to ${oldProducer}`);
  // Data: three pending events (one keyed), a dead letter, inbox records.
  for (const id of ['u-1', 'u-2', 'u-3', 'dead']) {
    await db.sql`select * from public.outbox_enqueue(event_type => 'Upgraded', source => 'test.upgrade',
      aggregate_type => 'order', aggregate_id => ${id}, payload => '{"before": true}'::jsonb,
      idempotency_key => ${id === 'u-1' ? 'key-before' : null})`;
  }
  await db.sql`update public.outbox set dead_lettered_at = now(), attempts = 10 where aggregate_id = 'dead'`;
  await db.sql`insert into public.inbox_message (consumer, message_key, outcome) values ('billing', 'm-1', 'processed'),
    ('billing', 'm-2', 'parked')`;
  await db.sql`insert into public.inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence)
    values ('billing', 'order', 'u-1', '', 0, 4)`;
  admin = connect({ url: db.url, max: 2, env: {}, searchPath: OUTBOX_SEARCH_PATH });
});
afterAll(async () => {
  for (const pool of pools) await pool.end({ timeout: 1 });
  await testRoles?.drop();
  await admin?.end({ timeout: 1 });
  await db?.sql.unsafe(`drop owned by ${oldProducer}; drop role if exists ${oldProducer}`).catch(() => {});
  await db?.drop();
  await bus?.close();
});

describe('migration 024 on an install in public (the release before it)', () => {
  it('moves tables, functions and history into schema outbox with every row, leaving only the wrappers', async () => {
    // 024 and every migration after it (the install is at 023).
    const later = readdirSync(MIGRATIONS_DIR)
      .filter((f) => f.endsWith('.sql') && f > '024')
      .map((f) => f.replace(/\.sql$/, ''))
      .sort();
    expect(later[0]).toBe('024_outbox_schema');
    expect(await migrate(db.url)).toEqual(later);
    const [where] = await admin<{ inOutbox: string[]; inPublic: string[]; stale: string[] }[]>`
      select array(select relname::text from pg_class where relnamespace = 'outbox'::regnamespace and relkind = 'r'
                   order by 1) as "inOutbox",
             array(select relname::text from pg_class where relnamespace = 'public'::regnamespace and relkind = 'r'
                   union all select proname::text from pg_proc where pronamespace = 'public'::regnamespace
                   order by 1) as "inPublic",
             array(select proname::text from pg_proc where pronamespace = 'outbox'::regnamespace
                   and pg_get_functiondef(oid) ~ '\\mpublic\\.' order by 1) as stale`;
    expect(where).toEqual({
      inOutbox: [
        'inbox_aggregate',
        'inbox_failed',
        'inbox_gap',
        'inbox_message',
        'outbox',
        'outbox_aggregate',
        'outbox_idempotency_key',
        // migration 031, after the move: created in schema outbox too
        'outbox_identity',
        'outbox_migrations',
      ],
      inPublic: ['outbox_enqueue', 'outbox_enqueue_many'],
      stale: [],
    });
    const [counts] = await admin<
      { pending: number; dead: number; keys: number; inbox: number; chains: number }[]
    >`
      select (select count(*)::int from outbox.outbox where published_at is null and dead_lettered_at is null) as pending,
             (select count(*)::int from outbox.outbox where dead_lettered_at is not null) as dead,
             (select count(*)::int from outbox.outbox_idempotency_key) as keys,
             (select count(*)::int from outbox.inbox_message) as inbox,
             (select count(*)::int from outbox.inbox_aggregate) as chains`;
    expect(counts).toEqual({ pending: 3, dead: 1, keys: 1, inbox: 2, chains: 1 });
    // A second migrate: up to date, nothing moved again.
    expect(await migrate(db.url)).toEqual([]);
  });

  it("keeps the previous release's unqualified producer calls working, and this release's enqueue", async () => {
    const url = new URL(db.url);
    url.username = oldProducer;
    url.password = 'old';
    // Its own search_path ("$user", public), as the previous release's producer has.
    const old = connect({ url: url.toString(), max: 1, env: {} });
    pools.push(old);
    const [viaWrapper] = await old.begin(
      (tx) => tx<{ sequence: string; duplicate: boolean }[]>`
        select sequence::text, duplicate from outbox_enqueue(event_type => 'Upgraded', source => 'test.upgrade',
          aggregate_type => 'order', aggregate_id => 'u-1', payload => '{}'::jsonb)`,
    );
    expect(viaWrapper).toEqual({ sequence: '2', duplicate: false });
    const [many] = await old.begin(
      (tx) => tx<{ duplicate: boolean }[]>`
        select duplicate from outbox_enqueue_many(array['Upgraded'], array['test.upgrade'], array['order'],
          array['u-9'], array['{}'::jsonb], array['key-before'])`,
    );
    // The key written before the upgrade was the admin's: keys answer for their own producer role
    // (migration 023), so this role's event with it is fresh.
    expect(many?.duplicate).toBe(false);
    const fresh = await old.begin((tx) =>
      enqueue(tx, {
        type: 'Upgraded',
        source: 'test.upgrade',
        aggregateType: 'order',
        aggregateId: 'u-2',
        payload: {},
      }),
    );
    expect(fresh).toMatchObject({ sequence: '2', duplicate: false });
  });

  it('lets the relay, logged in as itself after the deploy, publish the events enqueued before and after', async () => {
    testRoles = await createTestRoles({ url: db.url, sql: admin, drop: async () => {} });
    const relay = testRoles.connectAs(testRoles.roles.relay);
    const result = await runRelay({
      sql: relay,
      client: testClient(bus.url),
      settings: testSettings(),
      untilEmpty: true,
      maxConsecutiveErrors: 1,
    });
    expect(result.published).toBe(6);
    const ids = bus.events.map((e) => (e.detail as { aggregateId?: string }).aggregateId ?? '').sort();
    expect(ids).toHaveLength(6);
    const [dead] = await admin<{ n: number }[]>`
      select count(*)::int as n from outbox.outbox where dead_lettered_at is not null and published_at is null`;
    expect(dead?.n).toBe(1);
  });
});
