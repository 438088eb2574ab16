/**
 * The enqueue functions run with their owner's rights (SECURITY DEFINER), so nothing they call may
 * resolve to an object a caller created. A producer that may create objects in the outbox's schema
 * (a service whose own tables live in `public`, or PostgreSQL ≤ 14's defaults) plants, beside each
 * outbox function, overloads that a looser call would prefer: every parameter as `text`, and each
 * parameter in turn as `text`; beside them overloads of built-ins the bodies call. Each planted
 * function raises `PLANTED as <current_user>`: if one ran, the enqueue fails with that message (the
 * issue's reproduction read another service's payload that way). Valid and refused enqueues, one
 * and many, with and without idempotency keys, must answer exactly as without the plants.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalBus } from '../../shared/local/bus.ts';
import type { Sql } from '../../shared/platform/index.ts';
import { enqueue, enqueueMany } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { ensureRoles, prune } from '../../shared/relay/operations/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { testClient, testSettings } from '../support/relay.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';

let db: TestDatabase;
let testRoles: TestRoles;
let producer: Sql;

/** Built-ins the enqueue bodies call with arguments an exact-typed overload would match better. */
const PLANTED_BUILTINS = [
  'jsonb_build_object(text, bigint)',
  'jsonb_build_object(text, integer)',
  'to_json(text)',
  'format(text, text, text)',
  'format(text, integer, integer)',
  'array_fill(text, integer[])',
  'jsonb_object_agg(text, bigint)',
  'jsonb_typeof(text)',
  'cardinality(text[])',
  'array_ndims(text[])',
  'hashtextextended(text, integer)',
  'pg_advisory_xact_lock(integer)',
];

beforeAll(async () => {
  db = await createTestDatabase();
  testRoles = await createTestRoles(db);
  const role = testRoles.roles.producer;
  await db.sql.unsafe(`grant create on schema public to "${role}"`);
  producer = testRoles.connectAs(role);
  // The plants, created by the producer itself: one per outbox function and parameter shape.
  const functions = await db.sql<{ name: string; args: string[] }[]>`
    select p.proname as name, string_to_array(pg_get_function_identity_arguments(p.oid), ', ') as args
    from pg_proc p where p.pronamespace = 'outbox'::regnamespace and p.proname like 'outbox\\_%'
      and p.prokind = 'f'`;
  const types = (args: string[]) => args.map((a) => a.replace(/^\w+ /, ''));
  const signatures = new Set<string>();
  for (const f of functions) {
    const real = types(f.args.filter((a) => a !== ''));
    if (real.length === 0) continue;
    signatures.add(`${f.name}(${real.map(() => 'text').join(', ')})`);
    for (let i = 0; i < real.length; i++) {
      signatures.add(`${f.name}(${real.map((t, j) => (j === i ? 'text' : t)).join(', ')})`);
    }
  }
  // What a polymorphic helper (outbox_enqueue_check_array(text, anyarray) before migration 016)
  // would lose to.
  signatures.add('outbox_enqueue_check_array(text, text[])').add('outbox_enqueue_check_array(text, jsonb[])');
  const planted = [...signatures].filter(
    (s) => !functions.some((f) => `${f.name}(${types(f.args).join(', ')})` === s),
  );
  for (const signature of [...planted, ...PLANTED_BUILTINS]) {
    const body = `begin raise exception 'PLANTED % as %', '${signature}', current_user; end`;
    // jsonb_object_agg is an aggregate: a plain function of that name and types is still what a
    // call would resolve to first.
    const returns = signature.startsWith('jsonb_object_agg') ? 'jsonb' : 'void';
    await producer.unsafe(
      `create function public.${signature} returns ${returns} language plpgsql as $$ ${body} $$`,
    );
  }
  const [count] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from pg_proc p join pg_roles r on r.oid = p.proowner
    where r.rolname = ${role}`;
  // Every outbox function got at least one plant, and the built-ins all of theirs.
  expect(count?.n).toBeGreaterThanOrEqual(functions.length + PLANTED_BUILTINS.length);
});
afterAll(async () => {
  await testRoles?.drop();
  await db?.drop();
});

const event = (aggregateId: string, extra: Record<string, unknown> = {}) => ({
  type: 'PlantTested',
  source: 'test.plants',
  aggregateType: 'order',
  aggregateId,
  payload: { n: 1 },
  ...extra,
});

/** The error a producer's statement fails with: SQLSTATE, field and message. */
async function refusal(statement: string): Promise<{ code: string; column?: string; message: string }> {
  try {
    await producer.begin((tx) => tx.unsafe(statement));
  } catch (error) {
    const e = error as { code: string; column_name?: string; message: string };
    return { code: e.code, column: e.column_name, message: e.message };
  }
  throw new Error(`not refused: ${statement}`);
}

describe('SECURITY DEFINER enqueue functions with planted overloads beside them', () => {
  it('enqueues one and many, with and without idempotency keys, without running a plant', async () => {
    const one = await producer.begin((tx) => enqueue(tx, event('p-1')));
    const keyed = await producer.begin((tx) => enqueue(tx, event('p-1', { idempotencyKey: 'plant-1' })));
    const again = await producer.begin((tx) => enqueue(tx, event('p-1', { idempotencyKey: 'plant-1' })));
    const many = await producer.begin((tx) =>
      enqueueMany(tx, [event('p-2'), event('p-2', { idempotencyKey: 'plant-2' }), event('p-3')]),
    );
    // The SQL entry points called directly, as other languages do (typed: see the next test).
    const [viaSql] = await producer.begin((tx) =>
      tx.unsafe<{ sequence: string }[]>(`select sequence::text from outbox_enqueue('PlantTested'::text,
        'test.plants'::text, 'order'::text, 'p-1'::text, '{"n": 2}'::jsonb, 'plant-3'::text)`),
    );
    const [viaMany] = await producer.begin((tx) =>
      tx.unsafe<{ sequence: string }[]>(`select sequence::text from outbox_enqueue_many(array['PlantTested'],
        array['test.plants'], array['order'], array['p-4'], array['{}'::jsonb], null::text[], null::text[], 9000)`),
    );
    expect([one.sequence, keyed.sequence, again.duplicate, viaSql?.sequence]).toEqual(['1', '2', true, '3']);
    expect(many.map((r) => `${r.aggregateId}#${r.sequence}`)).toEqual(['p-2#1', 'p-2#2', 'p-3#1']);
    expect(viaMany?.sequence).toBe('1');
    const rows = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox`;
    expect(rows[0]?.n).toBe(7);
  });

  it('refuses bad events with the real typed error, never a plant', async () => {
    // Typed arguments, as the producer library sends them: the top-level call is the producer's own
    // (an untyped one would pick its own plant and run it as itself, which escalates nothing).
    const one = (event: string, key = 'null', maxEntryBytes = '1048576') =>
      `select * from outbox_enqueue(${event}, ${key}::text, null::text, ${maxEntryBytes}::integer)`;
    const fields = (type: string, source: string, payload: string) =>
      `${type}::text, ${source}::text, 'a'::text, '1'::text, '${payload}'::jsonb`;
    const many = (arrays: string, key = 'null::text[]', maxEntryBytes = '1048576') =>
      `select * from outbox_enqueue_many(${arrays}, ${key}, null::text[], ${maxEntryBytes}::integer)`;
    const cases: [string, string][] = [
      [one(fields(`'T'`, `'s'`, '{}'), 'null', '0'), 'max_entry_bytes'],
      [one(fields(`'T'`, `'s'`, '{}'), `'k-1'`, '0'), 'max_entry_bytes'],
      [one(fields(`'T'`, `'aws.x'`, '{}')), 'source'],
      [one(fields(`'T'`, `'aws.x'`, '{}'), `'k-2'`), 'source'],
      [one(fields(`' '`, `'s'`, '{}')), 'event_type'],
      [one(fields(`'T'`, `'s'`, '[1]')), 'payload'],
      [one(fields(`'T'`, `'s'`, '{"a": 1}'), 'null', '20'), 'payload'],
      [one(fields(`'T'`, `'s'`, '{"a": 12345678901234567890}')), 'payload'],
      [one(fields(`repeat('T', 129)`, `'s'`, '{}')), 'event_type'],
      [
        many(
          `array['T', 'T'], array['s', 'aws.s'], array['a', 'a'], array['1', '2'], array['{}'::jsonb, '{}'::jsonb]`,
        ),
        'source',
      ],
      [
        many(
          `array['T', 'T'], array['s', 's'], array['a', 'a'], array['1', '2'], array['{}'::jsonb, '{}'::jsonb]`,
          `array['k-3', null]`,
          '0',
        ),
        'max_entry_bytes',
      ],
      [
        many(`'[0:0]={T}'::text[], array['s'], array['a'], array['1'], array['{}'::jsonb]`, `array['k-4']`),
        'event_types',
      ],
      [many(`array['T'], array['s', 's'], array['a'], array['1'], array['{}'::jsonb]`), 'events'],
    ];
    for (const [statement, field] of cases) {
      const error = await refusal(statement);
      expect(error.message, statement).not.toContain('PLANTED');
      expect({ code: error.code, column: error.column }, statement).toEqual({ code: '22023', column: field });
    }
    const rows = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox`;
    expect(rows[0]?.n).toBe(7);
  });

  it('pins every SECURITY DEFINER function to a search_path without a schema others can write', async () => {
    const definers = await db.sql<{ name: string; config: string[] | null }[]>`
      select p.oid::regprocedure::text as name, p.proconfig as config
      from pg_proc p where p.prosecdef and p.pronamespace = 'outbox'::regnamespace order by 1`;
    expect(definers.map((d) => d.name.replace(/\(.*/, ''))).toEqual([
      // the inbox's deletes, for roles that hold no DELETE (migrations 026 and 029)
      'inbox_message_clears_trace',
      'outbox_enqueue',
      'outbox_enqueue_heartbeat',
      'outbox_enqueue_many',
      'outbox_inbox_forget_failed',
      'outbox_inbox_forget_gap',
    ]);
    for (const d of definers) expect(d.config, d.name).toEqual(['search_path=pg_catalog, pg_temp']);
  });

  it("plants nothing the relay's, the monitor's or the deploy's own statements pick up", async () => {
    // What those sessions call with untyped parameters or without an exact pg_catalog match: an
    // interval from a number of seconds, format() with two arguments, and oid = regclass (the role
    // helper's text overloads were planted before all tests).
    const plants = [
      'create function public.make_interval(secs text) returns interval',
      'create function public.make_interval(secs numeric) returns interval',
      'create function public.format(text, text) returns text',
      'create function public.planted_eq(oid, regclass) returns boolean',
    ];
    for (const plant of plants) {
      await producer.unsafe(
        `${plant} language plpgsql as $$ begin raise exception 'PLANTED % as %', '${plant}', current_user; end $$`,
      );
    }
    await producer.unsafe(
      'create operator public.= (leftarg = oid, rightarg = regclass, function = public.planted_eq)',
    );
    const bus = await startLocalBus();
    try {
      await producer.begin((tx) => enqueue(tx, event('p-relayed')));
      const relayed = await runRelay({
        sql: testRoles.connectAs(testRoles.roles.relay),
        client: testClient(bus.url),
        settings: testSettings(),
        untilEmpty: true,
        maxConsecutiveErrors: 1,
      });
      expect(relayed.published).toBeGreaterThan(0);
      const [left] = await db.sql<
        { n: number }[]
      >`select count(*)::int as n from outbox where published_at is null`;
      expect(left?.n).toBe(0);
      await db.sql`update outbox set published_at = now() - interval '30 days'`;
      const pruned = await prune(testRoles.connectAs(testRoles.roles.monitor), {
        publishedRetentionSeconds: 86_400,
        deadLetterRetentionSeconds: 86_400,
        inboxRetentionSeconds: 86_400,
        idempotencyKeyRetentionSeconds: 86_400,
        batchSize: 100,
        timeBudgetMs: 10_000,
      });
      expect(pruned.publishedDeleted).toBeGreaterThan(0);
      // The deploy: the admin ensures the roles again (as every `outbox migrate --roles` does).
      await ensureRoles(db.sql, testRoles.roles, 7_000);
    } finally {
      await bus.close();
    }
  });
});
