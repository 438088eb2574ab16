/**
 * Planting (issue 43): a role that may create objects in every schema an untrusted role can write
 * (`public`, and a schema named after each privileged role, which "$user" would put first on a
 * default search_path) plants, generated from pg_catalog:
 * - an operator for every operator name of pg_catalog over the types our statements use, for
 *   every pair of those types pg_catalog has no exact operator for (a plant matching exactly beats
 *   pg_catalog's implicit coercions: `sql_identifier = 'literal'`, `bigint / numeric`);
 * - for every pg_catalog function our SQL calls by name (read from migrations/ and shared/), each
 *   of its signatures with its polymorphic arguments made concrete, and the same with one more
 *   defaulted parameter; the same two for every outbox function;
 * - a table of each outbox table's name in each role-named schema, and of the migration history's
 *   (`outbox_migrations`), which before migration 024 lived in `public`.
 * No casts: CREATE CAST needs ownership of the source or target type, and our statements use no
 * type another role owns. Each plant records `<plant>@<current_user>` in a log anyone may insert
 * into (its own body on a search_path of pg_catalog alone, or it would call the other plants). Then everything privileged runs: migrate (fresh and up to date, with roles), enqueue (one,
 * many, keyed, refused), relay passes (success, a bus error, a poison head), the monitor's work
 * (prune, metrics counts, scale-out), CLI commands and the inbox. No plant may run and nothing may
 * fail. The last test is the control: the same relay pass on a session with `public` on its
 * search_path, as the relay's sessions had before migration 024, runs plants.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { EventBridgeEvent } from 'aws-lambda';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { inbox } from '../../shared/consumer/index.ts';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { connect, OUTBOX_SEARCH_PATH, type OutboxRoles, type Sql } from '../../shared/platform/index.ts';
import { MIGRATIONS_DIR } from '../../shared/platform/migrate.ts';
import { enqueue, enqueueMany, OutboxValidationError } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import {
  countParked,
  enqueueHeartbeat,
  getStatus,
  measureClaimable,
  migrateWithRoles,
  prune,
} from '../../shared/relay/operations/index.ts';
import { runCli } from '../support/cli.ts';
import { createEmptyDatabase, type EmptyDatabase } from '../support/db.ts';
import { testClient, testSettings } from '../support/relay.ts';

const suffix = randomBytes(4).toString('hex');
const roles: OutboxRoles = {
  relay: `relay_p_${suffix}`,
  monitor: `monitor_p_${suffix}`,
  producer: `producer_p_${suffix}`,
  consumer: `consumer_p_${suffix}`,
};
const planter = `planter_${suffix}`;
const password = `pw-${suffix}`;
let db: EmptyDatabase;
let admin: Sql;
let planterSql: postgres.Sql;
let bus: LocalBus;
const pools: Sql[] = [];

/** A pool logged in as `role`, sending no search_path: the role's own default applies. */
const as = (role: string): Sql => {
  const url = new URL(db.url);
  url.username = role;
  url.password = password;
  const pool = connect({ url: url.toString(), max: 2, env: {} });
  pools.push(pool);
  return pool;
};

/** The types our statements work with (and information_schema's, which node-pg-migrate reads). */
const TYPES = [
  'integer',
  'bigint',
  'numeric',
  'double precision',
  'text',
  'name',
  'uuid',
  'jsonb',
  'timestamp with time zone',
  'interval',
  'boolean',
  'information_schema.sql_identifier',
  'information_schema.character_data',
  'regclass',
  'oid',
  'text[]',
  'jsonb[]',
  'uuid[]',
  'bigint[]',
];

/** Words followed by `(` in our SQL: the migrations and every module under shared/. */
function namesCalledInOurSql(): Set<string> {
  const files: string[] = readdirSync(MIGRATIONS_DIR).map((f) => join(MIGRATIONS_DIR, f));
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts')) files.push(path);
    }
  };
  walk(new URL('../../shared', import.meta.url).pathname);
  const names = new Set<string>();
  for (const f of files) {
    for (const m of readFileSync(f, 'utf8').matchAll(/\b([a-z_][a-z0-9_]*)\s*\(/g)) names.add(m[1] as string);
  }
  return names;
}

/** The plants' DDL for one schema, generated from pg_catalog (and the outbox's functions). */
async function plantsFor(schema: string, calledNames: string[]): Promise<string[]> {
  const q = (s: string) => `"${s}"`;
  const ddl: string[] = [];
  const log = (label: string) =>
    `insert into public.plant_log values ('${label.replaceAll("'", "''")}@' || current_user)`;
  // Operators: one function per type pair, one operator per name pg_catalog lacks for that pair.
  const operators = await admin<{ name: string; l: string; r: string; fn: string }[]>`
    with types as (select t::regtype::oid as oid, t as spelled from unnest(${TYPES}::text[]) as t),
         names as (select distinct o.oprname from pg_catalog.pg_operator o
                   where o.oprkind = 'b' and o.oprleft in (select oid from types) and o.oprright in (select oid from types))
    select n.oprname::text as name, l.spelled as l, r.spelled as r,
           'plant_op_' || l.oid || '_' || r.oid as fn
    from names n cross join types l cross join types r
    where not exists (select from pg_catalog.pg_operator o where o.oprname = n.oprname and o.oprleft = l.oid
                      and o.oprright = r.oid and o.oprnamespace = 'pg_catalog'::regnamespace)
    order by 1, 2, 3`;
  const fns = new Map<string, [string, string]>();
  for (const o of operators) fns.set(o.fn, [o.l, o.r]);
  for (const [fn, [l, r]] of fns) {
    ddl.push(`create function ${q(schema)}.${fn}(${l}, ${r}) returns boolean language plpgsql
      set search_path = pg_catalog, pg_temp as $$
      begin ${log(`${schema}.op(${l},${r})`)}; return null; end $$`);
  }
  for (const o of operators) {
    ddl.push(
      `create operator ${q(schema)}.${o.name} (leftarg = ${o.l}, rightarg = ${o.r}, function = ${q(schema)}.${o.fn})`,
    );
  }
  // Functions: pg_catalog's signatures of the names our SQL calls, made concrete, and the same with
  // one more defaulted parameter; the outbox's functions likewise.
  const signatures = await admin<{ name: string; args: string[] }[]>`
    select p.proname::text as name,
           array(select case when t in ('anyelement', 'anynonarray', 'anycompatible', 'anycompatiblenonarray', '"any"', 'anyenum')
                             then 'text'
                             when t in ('anyarray', 'anycompatiblearray') then 'text[]'
                             else t end
                 from unnest(string_to_array(pg_catalog.oidvectortypes(p.proargtypes), ', ')) as t) as args
    from pg_catalog.pg_proc p
    where p.prokind = 'f'
      and ((p.pronamespace = 'pg_catalog'::regnamespace and p.proname = any(${calledNames}::text[]))
           or (p.pronamespace = pg_catalog.to_regnamespace('outbox')))
      and not exists (select from unnest(string_to_array(pg_catalog.oidvectortypes(p.proargtypes), ', ')) as t
                      where t in ('internal', 'cstring', 'anyrange', 'anymultirange', 'anycompatiblerange',
                                  'anycompatiblemultirange', 'trigger', 'event_trigger', 'record', 'language_handler',
                                  'fdw_handler', 'index_am_handler', 'table_am_handler', 'tsm_handler', 'void'))
    order by 1, 2`;
  const seen = new Set<string>();
  for (const s of signatures) {
    for (const extra of [[], ['x_plant integer default 0']]) {
      const args = [...s.args, ...extra].join(', ');
      const key = `${s.name}(${args})`;
      if (seen.has(key)) continue;
      seen.add(key);
      ddl.push(`create function ${q(schema)}.${q(s.name)}(${args}) returns text language plpgsql
        set search_path = pg_catalog, pg_temp as $$
        begin ${log(`${schema}.${s.name}(${s.args.join(',')}${extra.length ? ',default' : ''})`)}; return null; end $$`);
    }
  }
  return ddl;
}

/** Runs DDL statements as the planter, each on its own (one that pg_catalog refuses is skipped). */
async function plant(statements: string[]): Promise<number> {
  let planted = 0;
  for (let i = 0; i < statements.length; i += 200) {
    const chunk = statements.slice(i, i + 200);
    try {
      await planterSql.unsafe(chunk.join(';\n'));
      planted += chunk.length;
    } catch {
      for (const s of chunk) {
        try {
          await planterSql.unsafe(s);
          planted++;
        } catch {
          // e.g. a name that is also a reserved word, or an operator Postgres reserves
        }
      }
    }
  }
  return planted;
}

/** The plants that ran, as `<plant>@<role>`, and the log emptied. */
async function plantsRan(): Promise<string[]> {
  const rows = await admin<{ entry: string }[]>`delete from public.plant_log returning entry`;
  return rows.map((r) => r.entry).sort();
}

let planted = 0;

beforeAll(async () => {
  db = await createEmptyDatabase({ legacyPublic: true });
  bus = await startLocalBus();
  const name = new URL(db.url).pathname.slice(1);
  await db.sql.unsafe(`create role ${planter} login password '${password}';
    grant create on schema public to ${planter}; grant create on database "${name}" to ${planter};
    create table public.plant_log (entry text not null); grant insert on public.plant_log to public`);
  admin = connect({ url: db.url, max: 2, env: {}, searchPath: OUTBOX_SEARCH_PATH });
  const url = new URL(db.url);
  url.username = planter;
  url.password = password;
  planterSql = postgres(url.toString(), { max: 1, onnotice: () => {} });
  // The outbox's functions are planted too once they exist; before the first migrate, pg_catalog's.
  const called = [...namesCalledInOurSql()];
  planted += await plant(await plantsFor('public', called));
  // A fresh migrate with its roles (the deploy-time function's work) beside the plants in public.
  await migrateWithRoles(db.url, { roles, statementTimeoutMs: 7_000, consumers: ['billing'] });
  for (const role of [...Object.values(roles), `${roles.consumer}_billing`]) {
    await db.sql.unsafe(`alter role "${role}" password '${password}'`);
  }
  // Now a schema named after each privileged role (and the admin), with every plant, the outbox's
  // functions' overloads and tables of the outbox's tables' names; public gets the outbox's too.
  const privileged = [roles.relay, roles.monitor, roles.consumer, `${roles.consumer}_billing`, 'postgres'];
  for (const schema of privileged) {
    await planterSql.unsafe(`create schema "${schema}"`);
    planted += await plant(await plantsFor(schema, called));
    planted += await plant(
      [
        'outbox',
        'outbox_aggregate',
        'outbox_idempotency_key',
        'inbox_message',
        'inbox_aggregate',
        'inbox_gap',
        // node-pg-migrate's history: a plant here that migrate read would be migrations "applied".
        'outbox_migrations',
      ].map((t) => `create table "${schema}".${t} (id bigint)`),
    );
  }
  planted += await plant((await plantsFor('public', [])).filter((s) => /"outbox_/.test(s)));
  await plantsRan(); // creating a plant runs none; emptied anyway
}, 120_000);
afterAll(async () => {
  for (const pool of pools) await pool.end({ timeout: 1 });
  await planterSql?.end({ timeout: 1 });
  await admin?.end({ timeout: 1 });
  for (const role of [...Object.values(roles), `${roles.consumer}_billing`, planter]) {
    await db?.sql.unsafe(`drop owned by "${role}" cascade; drop role if exists "${role}"`).catch(() => {});
  }
  await db?.drop();
  await bus?.close();
});

const event = (aggregateId: string, idempotencyKey?: string) => ({
  type: 'Planted',
  source: 'test.planting',
  aggregateType: 'order',
  aggregateId,
  payload: { n: 1 },
  ...(idempotencyKey ? { idempotencyKey } : {}),
});

describe('every privileged statement beside plants in every schema an untrusted role can write', () => {
  it('planted thousands of operators, functions and tables', () => {
    expect(planted).toBeGreaterThan(5_000);
  });

  it('migrates up to date with roles, enqueues (one, many, keyed, refused) and runs no plant', async () => {
    expect(
      await migrateWithRoles(db.url, { roles, statementTimeoutMs: 7_000, consumers: ['billing'] }),
    ).toEqual([]);
    const producer = as(roles.producer);
    const one = await producer.begin((tx) => enqueue(tx, event('p-1')));
    const many = await producer.begin((tx) => enqueueMany(tx, [event('p-1'), event('p-2')]));
    const keyed = await producer.begin((tx) => enqueue(tx, event('p-3', 'k-1')));
    const again = await producer.begin((tx) => enqueue(tx, event('p-3', 'k-1')));
    expect([one.sequence, ...many.map((m) => m.sequence), keyed.duplicate, again.duplicate]).toEqual([
      '1',
      '2',
      '1',
      false,
      true,
    ]);
    await expect(
      producer.begin((tx) => enqueue(tx, { ...event('p-4'), source: 'aws.nope' })),
    ).rejects.toBeInstanceOf(OutboxValidationError);
    expect(await plantsRan()).toEqual([]);
  });

  it("cannot plant the migration history in public once migrate ran, and migrate reads none of the role-named schemas' plants", async () => {
    // Before the first migrate a planted public.outbox_migrations makes migrate refuse, naming its
    // owner (test/trust/regressions.test.ts); after it, migration 032's view holds the name.
    await expect(
      planterSql.unsafe('create table public.outbox_migrations (id int, name text, run_on timestamp)'),
    ).rejects.toThrow(/already exists/);
    const [history] = await admin<{ kind: string; owner: string; applied: number }[]>`
      select c.relkind::text as kind, c.relowner::regrole::text as owner,
             (select count(*)::int from outbox.outbox_migrations) as applied
      from pg_catalog.pg_class c where c.oid = 'public.outbox_migrations'::regclass`;
    expect(history).toEqual({ kind: 'v', owner: 'postgres', applied: readdirSync(MIGRATIONS_DIR).length });
    const plantedHistory = await admin<{ schema: string }[]>`
      select c.relnamespace::regnamespace::text as schema from pg_catalog.pg_class c
      where c.relname = 'outbox_migrations' and c.relowner = ${planter}::regrole order by 1`;
    expect(plantedHistory.map((r) => r.schema)).toContain(roles.relay);
    expect(plantedHistory.map((r) => r.schema)).toContain('postgres');
    expect(
      await migrateWithRoles(db.url, { roles, statementTimeoutMs: 7_000, consumers: ['billing'] }),
    ).toEqual([]);
    expect(await plantsRan()).toEqual([]);
  });

  it('runs relay passes (success, a bus error, a poison head) and the monitor, and runs no plant', async () => {
    const relay = as(roles.relay);
    const producer = as(roles.producer);
    bus.setFaults({ serverErrorRate: 1 });
    const failing = await runRelay({
      sql: relay,
      client: testClient(bus.url, { maxAttempts: 1 }),
      settings: testSettings(),
      once: true,
      maxConsecutiveErrors: 5,
    });
    expect(failing.published).toBe(0);
    await admin`update outbox set available_at = now()`;
    bus.setFaults({});
    const ok = await runRelay({
      sql: relay,
      client: testClient(bus.url),
      settings: testSettings(),
      untilEmpty: true,
      maxConsecutiveErrors: 1,
    });
    expect(ok.published).toBe(4);
    // The relay role read the outbox's id (migration 031) among the plants, and named its outbox.
    const named = bus.events.map((e) => (e.detail.metadata as { outboxId?: string }).outboxId);
    expect(named.length).toBeGreaterThan(0);
    expect(named.every((id) => /^[0-9a-f-]{36}$/.test(id ?? ''))).toBe(true);
    await producer.begin((tx) =>
      enqueueMany(tx, [{ ...event('poison'), payload: { poison: 'yes' } }, event('poison')]),
    );
    bus.setFaults({ poisonMarker: '"poison":"yes"', poisonCode: 'InvalidArgument' });
    await runRelay({
      sql: relay,
      client: testClient(bus.url),
      settings: testSettings({ maxAttempts: 1 }),
      untilEmpty: true,
      maxConsecutiveErrors: 3,
    });
    bus.setFaults({});
    const monitor = as(roles.monitor);
    const status = await getStatus(monitor);
    expect(status.deadLettered).toBe(1);
    await prune(monitor, {
      publishedRetentionSeconds: 0,
      deadLetterRetentionSeconds: 86_400,
      inboxRetentionSeconds: 0,
      idempotencyKeyRetentionSeconds: 0,
      batchSize: 100,
      timeBudgetMs: 10_000,
    });
    await countParked(monitor, ['billing']);
    // The heartbeat (migration 030): the monitor's one enqueue, through its definer function.
    expect((await enqueueHeartbeat(monitor, 300)).eventId).toMatch(/^[0-9a-f-]{36}$/);
    await measureClaimable(monitor, {
      maxRelays: 3,
      backlogPerRelay: 10,
      ordering: 'aggregate',
      deadLetterPolicy: 'continue',
    });
    expect(await plantsRan()).toEqual([]);
  });

  it('runs CLI commands and the inbox, and runs no plant; another producer still enqueues', async () => {
    const env = { HOME: process.env.HOME, PATH: process.env.PATH, DATABASE_URL: db.url };
    const status = await runCli(['status', '--json'], { env });
    expect(status.code, status.stderr).toBe(0);
    const list = await runCli(['dead-letters', 'list', '--json'], { env });
    expect(list.code, list.stderr).toBe(0);
    const handler = inbox(
      { sql: as(`${roles.consumer}_billing`), consumer: 'billing', metrics: false },
      async () => 'applied',
    );
    const delivered = delivery({
      detailType: 'Planted',
      region: 'us-east-1',
      metadata: { eventId: randomUUID(), aggregateId: 'i-1', sequence: 1 },
      data: { n: 1 },
    }) as unknown as EventBridgeEvent<'Planted', never>;
    await handler(delivered, {} as never);
    const [row] = await admin<{ n: number }[]>`select count(*)::int as n from outbox.inbox_message`;
    expect(row?.n).toBe(1);
    const second = `${roles.producer}_second`;
    await db.sql.unsafe(`create role "${second}" login password '${password}' in role "${roles.producer}"`);
    try {
      const other = as(second);
      const result = await other.begin((tx) => enqueue(tx, event('second')));
      expect(result.duplicate).toBe(false);
    } finally {
      await db.sql.unsafe(`drop role "${second}"`).catch(() => {});
    }
    expect(await plantsRan()).toEqual([]);
  });

  it('control: on a search_path with public (as before migration 024), the same statements run plants', async () => {
    // node-pg-migrate's history lookup, as the admin on its default search_path ("$user", public):
    // what every `outbox migrate` ran before this release (issue 43, item 1).
    const exposedAdmin = connect({ url: db.url, max: 1, env: {}, searchPath: '"$user", public' });
    pools.push(exposedAdmin);
    await exposedAdmin.unsafe(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'outbox'
      AND table_name = 'outbox_migrations'`);
    const asAdmin = await plantsRan();
    // A relay pass, on a relay session with public (then outbox) on its search_path.
    const url = new URL(db.url);
    url.username = roles.relay;
    url.password = password;
    const exposedRelay = connect({ url: url.toString(), max: 1, env: {}, searchPath: 'public, outbox' });
    pools.push(exposedRelay);
    await as(roles.producer).begin((tx) => enqueue(tx, event('control')));
    await runRelay({
      sql: exposedRelay,
      client: testClient(bus.url),
      settings: testSettings(),
      untilEmpty: true,
      maxConsecutiveErrors: 1,
    }).catch(() => {});
    const asRelay = await plantsRan();
    // For the record: what the fixed search_path keeps from running.
    process.stdout.write(
      `planting control: ${planted} plants; without the search_path at connect, ${asAdmin.length} ran as the ` +
        `admin in migrate's history lookup, ${asRelay.length} as the relay in a pass\n`,
    );
    expect(asAdmin.length).toBeGreaterThan(0);
    expect(asAdmin.some((e) => e.includes('sql_identifier') && e.endsWith('@postgres'))).toBe(true);
  });
});
