/**
 * Issue 43's reproductions, each against the real roles (`ensureRoles`) of a migrated database.
 * A plant is a function a producer creates in a schema the privileged sessions search; it appends
 * `<plant>@<current_user>` to a log table anyone may insert into, then answers as the built-in
 * would, so a statement that resolves to it succeeds and only the log shows that it ran.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, OUTBOX_SEARCH_PATH, type Sql } from '../../shared/platform/index.ts';
import { migrate } from '../../shared/platform/migrate.ts';
import { enqueue, enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { ensureRoles } from '../../shared/relay/operations/index.ts';
import { claimBatch, recordFailures, releaseUnsent } from '../../shared/relay/sql/index.ts';
import { createEmptyDatabase, createTestDatabase, type TestDatabase } from '../support/db.ts';
import { claimOptions } from '../support/relay.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';

let db: TestDatabase;
let testRoles: TestRoles;
let producer: Sql;
let relay: Sql;
/** A second service's producer: a login role of its own, member of the producer role. */
let otherProducer: Sql;

beforeAll(async () => {
  db = await createTestDatabase({ searchPath: OUTBOX_SEARCH_PATH });
  testRoles = await createTestRoles(db);
  const role = testRoles.roles.producer;
  // The threat model: a producer whose own tables live in a schema the privileged sessions search.
  await db.sql.unsafe(`grant create on schema public to "${role}"`);
  producer = testRoles.connectAs(role);
  relay = testRoles.connectAs(testRoles.roles.relay);
  const other = `${role}_other`;
  await db.sql.unsafe(`create role "${other}" login in role "${role}"`);
  const url = new URL(testRoles.urlOf(role));
  await db.sql.unsafe(`alter role "${other}" password '${decodeURIComponent(url.password)}'`);
  url.username = other;
  otherProducer = connect({ url: url.toString(), max: 2, env: {} });
  await producer.unsafe(`create table public.plant_log (entry text not null)`);
  await producer.unsafe(`grant insert on public.plant_log to public`);
});
afterAll(async () => {
  await otherProducer?.end({ timeout: 1 });
  await db?.sql.unsafe(
    `drop owned by "${testRoles?.roles.producer}_other"; drop role if exists "${testRoles?.roles.producer}_other"`,
  );
  await testRoles?.drop();
  await db?.drop();
});

/** The plants that ran, as `<plant>@<role>`, and the log emptied. */
async function plantsRan(): Promise<string[]> {
  const rows = await db.sql<{ entry: string }[]>`delete from public.plant_log returning entry`;
  return rows.map((r) => r.entry).sort();
}

/** Enqueues one event as the producer and leases it to `leaseToken`, as a claim would; its row id. */
async function leasedEvent(aggregateId: string, leaseToken: string): Promise<string> {
  const result = await producer.begin((tx) =>
    enqueue(tx, { type: 'T', source: 'test.trust', aggregateType: 'a', aggregateId, payload: {} }),
  );
  const [row] = await db.sql<{ id: string }[]>`update outbox set lease_token = ${leaseToken}::uuid,
    lease_expires_at = now() + interval '1 minute', attempts = 1
    where event_id = ${result.eventId}::uuid returning id::text`;
  if (!row) throw new Error(`no row for ${result.eventId}`);
  return row.id;
}

describe('issue 43, item 2: the relay divides with operators pg_catalog has exactly', () => {
  it('records failures and releases unsent rows without running a planted bigint / numeric', async () => {
    await producer.unsafe(`
      create function public.plant_div(bigint, numeric) returns numeric language plpgsql as $$
      begin
        insert into public.plant_log values ('bigint/numeric@' || current_user);
        return pg_catalog.numeric_div($1::numeric, $2);
      end $$;
      create operator public./ (leftarg = bigint, rightarg = numeric, function = public.plant_div)`);
    try {
      const lease = randomUUID();
      const failed = await leasedEvent('div-1', lease);
      const unsent = await leasedEvent('div-2', lease);
      const recorded = await recordFailures(relay, lease, [
        { id: failed, error: 'X: bus down', deadLetter: false, retryInMs: 1500, giveBackAttempt: true },
      ]);
      const released = await releaseUnsent(relay, lease, [
        { id: unsent, notBeforeMs: 2500, giveBackAttempt: false },
      ]);
      expect([...recorded]).toEqual([failed]);
      expect(released).toBe(1);
      expect(await plantsRan()).toEqual([]);
      // The backoffs were applied on the database clock, in seconds (1.5 s and 2.5 s from now).
      const rows = await db.sql<{ id: string; wait: number }[]>`
        select id::text, ceil(extract(epoch from available_at - now()))::int as wait from outbox
        where id in (${failed}, ${unsent}) order by id`;
      expect(rows.map((r) => r.wait)).toEqual([2, 3]);
    } finally {
      await db.sql.unsafe(
        `drop operator public./ (bigint, numeric); drop function public.plant_div(bigint, numeric)`,
      );
    }
  });
});

describe('issue 43, item 4: an idempotency key answers for its own producer and source only', () => {
  const payment = (idempotencyKey: string, source = 'test.payments'): OutboxEvent => ({
    type: 'PaymentCaptured',
    source,
    aggregateType: 'card',
    aggregateId: '4111-xxxx',
    payload: { amount: 991 },
    idempotencyKey,
  });
  const probe = (idempotencyKey: string, source: string): OutboxEvent => ({
    type: 'Probe',
    source,
    aggregateType: 'probe',
    aggregateId: 'p-1',
    payload: {},
    idempotencyKey,
  });

  it("returns nothing of another producer's event through its key, and its key suppresses nothing", async () => {
    const real = await producer.begin((tx) => enqueue(tx, payment('payment-991-captured')));
    // Another role, with its own source and with the victim's: a fresh event of its own each time.
    const read = await otherProducer.begin((tx) =>
      enqueue(tx, probe('payment-991-captured', 'test.attacker')),
    );
    const spoofed = await otherProducer.begin((tx) =>
      enqueue(tx, probe('payment-991-captured', 'test.payments')),
    );
    // The same role (services sharing the producer role), another source: fresh as well.
    const shared = await producer.begin((tx) => enqueue(tx, probe('payment-991-captured', 'test.shop')));
    for (const r of [read, spoofed, shared]) {
      expect(r).toMatchObject({ aggregateType: 'probe', aggregateId: 'p-1', duplicate: false });
      expect(r.eventId).not.toBe(real.eventId);
    }
    // A key taken first by another producer, even under the victim's source, suppresses nothing.
    await otherProducer.begin((tx) => enqueue(tx, probe('refund-7', 'test.payments')));
    const later = await producer.begin((tx) => enqueue(tx, payment('refund-7')));
    expect(later).toMatchObject({ aggregateType: 'card', aggregateId: '4111-xxxx', duplicate: false });
    // The key still deduplicates its own producer's repeat.
    const again = await producer.begin((tx) => enqueue(tx, payment('payment-991-captured')));
    expect(again).toMatchObject({ eventId: real.eventId, sequence: real.sequence, duplicate: true });
    const stored = await db.sql<{ n: number }[]>`
      select count(*)::int as n from outbox where event_id = ${later.eventId}::uuid and event_type = 'PaymentCaptured'`;
    expect(stored[0]?.n).toBe(1);
    expect(await plantsRan()).toEqual([]);
  });
});

/**
 * A planted `=` for information_schema's sql_identifier, the operator node-pg-migrate's own
 * `table_schema = '…'` lookup resolves to when the schema holding it is on the session's path
 * (pg_catalog has no exact `sql_identifier = unknown`). Run as a superuser, it would make the
 * producer one.
 */
const PLANT_SQL_IDENTIFIER_EQ = (producerRole: string) => `
  create function public.plant_sqlid_eq(information_schema.sql_identifier, information_schema.sql_identifier)
  returns boolean language plpgsql as $$
  begin
    insert into public.plant_log values ('sql_identifier=@' || current_user);
    if (select rolsuper from pg_catalog.pg_roles where rolname = current_user) then
      execute 'alter role "${producerRole}" superuser';
    end if;
    return pg_catalog.nameeq($1::name, $2::name);
  end $$;
  create operator public.= (leftarg = information_schema.sql_identifier,
    rightarg = information_schema.sql_identifier, function = public.plant_sqlid_eq)`;

describe('issue 43, item 1: outbox migrate never resolves an operator through public', () => {
  it('migrates an up-to-date database and a fresh one as the superuser without running a planted sql_identifier =', async () => {
    const role = testRoles.roles.producer;
    await producer.unsafe(PLANT_SQL_IDENTIFIER_EQ(role));
    const fresh = await createEmptyDatabase({ legacyPublic: true });
    try {
      // Up to date: the history lookup alone ran the plant before (every deploy's migrate).
      expect(await migrate(db.url)).toEqual([]);
      // Fresh, with the same plant waiting in its public schema.
      await fresh.sql.unsafe(`grant create on schema public to "${role}"`);
      await fresh.sql.unsafe(`create table public.plant_log (entry text not null)`);
      await fresh.sql.unsafe(`grant insert on public.plant_log to public`);
      await fresh.sql.unsafe(`set role "${role}"; ${PLANT_SQL_IDENTIFIER_EQ(role)}; reset role`);
      expect((await migrate(fresh.url)).length).toBeGreaterThan(20);
      const [log] = await fresh.sql<{ n: number }[]>`select count(*)::int as n from public.plant_log`;
      expect(log?.n).toBe(0);
      expect(await plantsRan()).toEqual([]);
      const [r] = await db.sql<
        { rolsuper: boolean }[]
      >`select rolsuper from pg_catalog.pg_roles where rolname = ${role}`;
      expect(r?.rolsuper).toBe(false);
    } finally {
      await fresh.drop();
      await db.sql.unsafe(`drop operator public.= (information_schema.sql_identifier, information_schema.sql_identifier);
        drop function public.plant_sqlid_eq(information_schema.sql_identifier, information_schema.sql_identifier)`);
    }
  });
});

describe('issue 43, item 3: a same-named overload with a defaulted extra parameter makes no call ambiguous', () => {
  it('keeps migrate, ensureRoles, enqueue (one, many, keyed) and the relay working beside the plants', async () => {
    await producer.unsafe(`
      create function public.outbox_enqueue(event_type text, source text, aggregate_type text, aggregate_id text,
        payload jsonb, idempotency_key text default null, trace_header text default null,
        max_entry_bytes integer default 1048576, x integer default 0)
      returns table (event_id uuid, sequence bigint, duplicate boolean) language plpgsql as $$
      begin insert into public.plant_log values ('outbox_enqueue@' || current_user); end $$;
      create function public.outbox_enqueue_many(event_types text[], sources text[], aggregate_types text[],
        aggregate_ids text[], payloads jsonb[], idempotency_keys text[] default null, trace_headers text[] default null,
        max_entry_bytes integer default 1048576, x integer default 0)
      returns table (ord integer, event_id uuid, aggregate_type text, aggregate_id text, sequence bigint, duplicate boolean)
      language plpgsql as $$ begin insert into public.plant_log values ('outbox_enqueue_many@' || current_user); end $$;
      create function public.outbox_enqueue_insert(event_types text[], sources text[], aggregate_types text[],
        aggregate_ids text[], payloads jsonb[], idempotency_keys text[], trace_headers text[], n integer, x integer default 0)
      returns table (ord integer, event_id uuid, aggregate_type text, aggregate_id text, sequence bigint, duplicate boolean)
      language plpgsql as $$ begin insert into public.plant_log values ('outbox_enqueue_insert@' || current_user); end $$;
      create function public.outbox_ensure_role(role_name text, timeout_ms integer, grant_templates text[], x integer default 0)
      returns void language plpgsql as $$ begin insert into public.plant_log values ('outbox_ensure_role@' || current_user); end $$`);
    try {
      expect(await migrate(db.url)).toEqual([]);
      await ensureRoles(db.sql, testRoles.roles, 7_000);
      const event = (aggregateId: string, idempotencyKey?: string): OutboxEvent => ({
        type: 'T',
        source: 'test.trust',
        aggregateType: 'ambiguous',
        aggregateId,
        payload: {},
        ...(idempotencyKey ? { idempotencyKey } : {}),
      });
      const one = await producer.begin((tx) => enqueue(tx, event('a-1')));
      const many = await producer.begin((tx) => enqueueMany(tx, [event('a-1'), event('a-2')]));
      const keyed = await otherProducer.begin((tx) => enqueue(tx, event('a-3', 'k-ambiguous')));
      expect([one.sequence, ...many.map((m) => m.sequence), keyed.duplicate]).toEqual(['1', '2', '1', false]);
      const claimed = await relay.begin((tx) => claimBatch(tx, claimOptions(randomUUID())));
      expect(claimed.filter((e) => e.aggregateType === 'ambiguous')).toHaveLength(4);
      expect(await plantsRan()).toEqual([]);
    } finally {
      await db.sql.unsafe(`
        drop function public.outbox_enqueue(text, text, text, text, jsonb, text, text, integer, integer);
        drop function public.outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer, integer);
        drop function public.outbox_enqueue_insert(text[], text[], text[], text[], jsonb[], text[], text[], integer, integer);
        drop function public.outbox_ensure_role(text, integer, text[], integer)`);
    }
  });
});

describe('issue 43, item 6: a schema named after a privileged role, or named outbox, shadows nothing', () => {
  it("leaves the relay on the real outbox when a role with CREATE on the database makes a schema of the relay's name", async () => {
    const name = new URL(db.url).pathname.slice(1);
    await db.sql.unsafe(`grant create on database "${name}" to "${testRoles.roles.producer}"`);
    const shadow = testRoles.roles.relay;
    // The shadow: a table of the outbox's name, with one pending row of the planter's choosing.
    await producer.unsafe(`create schema if not exists "${shadow}"`);
    await producer.unsafe(`create table "${shadow}".outbox (id bigint, event_id uuid, aggregate_type text,
      aggregate_id text, sequence bigint, type_sequence bigint, event_type text, source text, payload jsonb,
      trace_header text, attempts integer, available_at timestamptz, published_at timestamptz,
      dead_lettered_at timestamptz, lease_token uuid, lease_expires_at timestamptz, created_at timestamptz)`);
    await producer.unsafe(`insert into "${shadow}".outbox (id, aggregate_type, aggregate_id, event_type, source, payload)
      values (1, 'shadow', 's-1', 'Forged', 'test.forged', '{}')`);
    await producer.unsafe(
      `grant usage on schema "${shadow}" to public; grant all on "${shadow}".outbox to public`,
    );
    try {
      await producer.begin((tx) =>
        enqueue(tx, {
          type: 'T',
          source: 'test.trust',
          aggregateType: 'real',
          aggregateId: 'r-1',
          payload: {},
        }),
      );
      const claimed = await relay.begin((tx) => claimBatch(tx, claimOptions(randomUUID())));
      expect(claimed.map((e) => e.aggregateType)).toContain('real');
      expect(claimed.map((e) => e.aggregateType)).not.toContain('shadow');
    } finally {
      await db.sql.unsafe(`drop schema "${shadow}" cascade`);
    }
  });

  it('refuses to migrate into a schema outbox another role created first', async () => {
    const early = await createEmptyDatabase({ legacyPublic: true });
    const name = new URL(early.url).pathname.slice(1);
    try {
      await early.sql.unsafe(`grant create on database "${name}" to "${testRoles.roles.producer}"`);
      await early.sql.unsafe(`set role "${testRoles.roles.producer}"; create schema outbox; reset role`);
      await expect(migrate(early.url)).rejects.toThrow(/schema outbox is owned by/);
      const [t] = await early.sql<{ n: number }[]>`select count(*)::int as n from pg_catalog.pg_class
        where relnamespace = 'outbox'::regnamespace`;
      expect(t?.n).toBe(0);
    } finally {
      await early.drop();
    }
  });
  it('refuses to take a public.outbox_migrations another role planted for the history of an earlier install', async () => {
    // Before migration 024 the history was public.outbox_migrations, and migrate moves it into the
    // outbox's schema. A table another role planted there would be read as migrations applied.
    const planted = await createEmptyDatabase({ legacyPublic: true });
    try {
      await planted.sql.unsafe(`grant create on schema public to "${testRoles.roles.producer}"`);
      await planted.sql.unsafe(
        `set role "${testRoles.roles.producer}"; create table public.outbox_migrations (id int, name text, run_on timestamp); reset role`,
      );
      await expect(migrate(planted.url)).rejects.toThrow(
        new RegExp(`public.outbox_migrations is owned by ${testRoles.roles.producer}`),
      );
      const [t] = await planted.sql<{ schema: string }[]>`
        select c.relnamespace::regnamespace::text as schema from pg_catalog.pg_class c
        where c.relname = 'outbox_migrations'`;
      expect(t?.schema).toBe('public');
    } finally {
      await planted.drop();
    }
  });
});
