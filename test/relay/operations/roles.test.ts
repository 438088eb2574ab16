/**
 * The deploy-time database roles, each doing its real work logged in as itself: the relay claims
 * and marks, the monitor prunes and counts, the producer enqueues, the consumer runs the inbox.
 * A grant that is missing fails here with 42501, as it would in AWS on every invocation. The
 * database has PUBLIC's default privileges revoked (a common hardening), so every role works
 * with what `ensureRoles` grants it and nothing else; each is refused what its work does not need.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inbox } from '../../../shared/consumer/index.ts';
import { type LocalBus, startLocalBus } from '../../../shared/local/bus.ts';
import type { OutboxRoles, Sql } from '../../../shared/platform/index.ts';
import { enqueue, enqueueMany } from '../../../shared/producer/index.ts';
import { enqueue as enqueueWithPg } from '../../../shared/producer/pg.ts';
import { runRelay } from '../../../shared/relay/index.ts';
import { getBacklogDetail, getStatus, prune } from '../../../shared/relay/operations/index.ts';
import {
  abandonLease,
  claimBatch,
  countHeldBack,
  hasPending,
  markPublished,
  recordFailures,
  releaseUnsent,
  renewLease,
  startRound,
  unparkNextEvents,
} from '../../../shared/relay/sql/index.ts';
import { createTestDatabase, type TestDatabase } from '../../support/db.ts';
import { lambdaContext } from '../../support/lambda.ts';
import { claimOptions, testClient, testSettings } from '../../support/relay.ts';
import { createTestRoles, type TestRoles } from '../../support/roles.ts';

let db: TestDatabase;
let bus: LocalBus;
let testRoles: TestRoles;
let roles: OutboxRoles;
beforeAll(async () => {
  db = await createTestDatabase();
  bus = await startLocalBus();
  await db.sql.unsafe(
    'revoke execute on all functions in schema public from public; revoke all on schema public from public',
  );
  testRoles = await createTestRoles(db);
  roles = testRoles.roles;
});
afterAll(async () => {
  await testRoles?.drop();
  await db?.drop();
  await bus?.close();
});

/** A pool logged in as `role`, with the connection settings the functions use. */
const as = (role: string): Sql => testRoles.connectAs(role);

/** Runs `statement` as `role` and returns the SQLSTATE it failed with, or 'ok'. */
async function attempt(role: string, statement: string): Promise<string> {
  try {
    await as(role).unsafe(statement);
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
}

const event = (aggregateId: string, n: number) => ({
  type: 'RoleTested',
  source: 'test.roles',
  aggregateType: 'order',
  aggregateId,
  payload: { n },
});

describe('database roles, each doing its real work as itself', () => {
  it('lets the producer enqueue in its own transaction, and the relay claim, publish and mark', async () => {
    await db.sql`truncate outbox.outbox, outbox_aggregate, outbox_idempotency_key`;
    bus.reset();
    const producer = as(roles.producer);
    await producer.begin((tx) => enqueueMany(tx, [event('r-1', 1), event('r-1', 2), event('r-2', 1)]));
    // The same role through the SQL function other languages call, with an idempotency key, twice.
    const viaSql = () =>
      producer.begin(
        (tx) => tx<{ sequence: string; duplicate: boolean }[]>`
          select * from outbox.outbox_enqueue(event_type => 'RoleTested', source => 'test.roles',
            aggregate_type => 'order', aggregate_id => 'r-2', payload => '{"n": 2}'::jsonb,
            idempotency_key => 'role-key')`,
      );
    expect((await viaSql()).map((r) => [r.sequence, r.duplicate])).toEqual([['2', false]]);
    expect((await viaSql()).map((r) => [r.sequence, r.duplicate])).toEqual([['2', true]]);

    const result = await runRelay({
      sql: as(roles.relay),
      client: testClient(bus.url),
      settings: testSettings(),
      untilEmpty: true,
      maxConsecutiveErrors: 1,
    });
    expect(result.published).toBe(4);
    expect(
      bus.events.map((e) => (e.detail as { metadata: { aggregateId: string } }).metadata.aggregateId).sort(),
    ).toEqual(['r-1', 'r-1', 'r-2', 'r-2']);
    const [row] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from outbox.outbox where published_at is not null`;
    expect(row?.n).toBe(4);
  });

  it("lets the monitor prune expired outbox rows, inbox records, the inbox's order state and failed events' traces, and idempotency keys, and count the backlog", async () => {
    await db.sql`truncate outbox.outbox, outbox_aggregate, inbox_message, inbox_aggregate, inbox_gap, inbox_failed, outbox_idempotency_key`;
    await db.sql.begin((tx) =>
      enqueueMany(tx, [{ ...event('p-1', 1), idempotencyKey: 'p-1-key' }, event('p-2', 1), event('p-3', 1)]),
    );
    await db.sql`update outbox.outbox_idempotency_key set created_at = now() - interval '60 days'`;
    await db.sql`
      update outbox.outbox set published_at = now() - interval '30 days' where aggregate_id = 'p-1'`;
    await db.sql`
      update outbox.outbox set dead_lettered_at = now() - interval '60 days', discarded_at = now() - interval '59 days'
      where aggregate_id = 'p-2'`;
    await db.sql`
      insert into outbox.inbox_message (consumer, message_key, processed_at)
      values ('billing', 'old', now() - interval '60 days'), ('billing', 'new', now())`;
    // A parked event waits for an operator however old it is: never pruned.
    await db.sql`
      insert into outbox.inbox_message (consumer, message_key, processed_at, outcome)
      values ('billing', 'parked', now() - interval '60 days', 'parked')`;
    await db.sql`
      insert into outbox.inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence, updated_at)
      values ('billing', 'order', 'quiet', 's', '', 3, now() - interval '60 days'),
             ('billing', 'order', 'quiet', '', '', 3, now() - interval '60 days'),
             ('billing', 'order', 'busy', 's', '', 9, now())`;
    await db.sql`
      insert into outbox.inbox_gap (consumer, message_key, first_seen_at, last_seen_at)
      values ('billing', 'gone', now() - interval '61 days', now() - interval '60 days'),
             ('billing', 'waiting', now(), now())`;
    await db.sql`
      insert into outbox.inbox_failed (consumer, event_id, event, error_name, error_message, last_failed_at)
      values ('billing', 'forgotten', '{}', 'Error', 'x', now() - interval '60 days'),
             ('billing', 'failed', '{}', 'Error', 'x', now() - interval '1 hour')`;

    const monitor = as(roles.monitor);
    const pruned = await prune(monitor, {
      publishedRetentionSeconds: 7 * 86_400,
      deadLetterRetentionSeconds: 30 * 86_400,
      inboxRetentionSeconds: 30 * 86_400,
      idempotencyKeyRetentionSeconds: 30 * 86_400,
      batchSize: 10,
      timeBudgetMs: 10_000,
    });
    expect(pruned).toMatchObject({
      publishedDeleted: 1,
      deadLettersDeleted: 1,
      inboxDeleted: 4,
      idempotencyKeysDeleted: 1,
    });
    const status = await getStatus(monitor);
    expect(status).toMatchObject({ pending: 1, deadLettered: 0 });
    // `outbox status`'s other figures, as the monitor's user (docs/operations.md#connect-the-cli-to-the-deployed-database).
    const detail = await getBacklogDetail(monitor, {
      maxRelays: 4,
      backlogPerRelay: 1,
      ordering: 'aggregate',
      deadLetterPolicy: 'block',
    });
    expect(detail).toMatchObject({ heldBack: 0, inBackoff: 0, scaleOut: { relays: 1, claimable: 1 } });
    const left = await db.sql<{ aggregate_id: string }[]>`select aggregate_id from outbox.outbox`;
    expect(left.map((r) => r.aggregate_id)).toEqual(['p-3']);
    const keys = await db.sql<
      { message_key: string }[]
    >`select message_key from outbox.inbox_message order by message_key`;
    expect(keys.map((r) => r.message_key)).toEqual(['new', 'parked']);
    // A chain's own row (source '') stays however quiet; a per-source row of migrations 010 to
    // 017 goes once the chain's row has taken it over.
    const chains = await db.sql<
      { aggregate_id: string; source: string }[]
    >`select aggregate_id, source from outbox.inbox_aggregate order by aggregate_id`;
    expect(chains).toEqual([
      { aggregate_id: 'busy', source: 's' },
      { aggregate_id: 'quiet', source: '' },
    ]);
    const gaps = await db.sql<{ message_key: string }[]>`select message_key from outbox.inbox_gap`;
    expect(gaps.map((r) => r.message_key)).toEqual(['waiting']);
    const failed = await db.sql<{ event_id: string }[]>`select event_id from outbox.inbox_failed`;
    expect(failed.map((r) => r.event_id)).toEqual(['failed']);
    expect(status.inboxParked).toBe(1);
    expect(status.inboxFailed).toBe(1);
  });

  it('lets the consumer run the inbox, in every order mode, and park an event', async () => {
    await db.sql`truncate outbox.inbox_message, inbox_aggregate, inbox_gap`;
    const consumer = as(roles.consumer);
    const outcomes: string[] = [];
    const run = (order: 'none' | 'ignore-stale' | 'wait-for-gap', sequence: number) => {
      const handler = inbox(
        {
          sql: consumer,
          consumer: `billing-${order}`,
          order,
          gapWaitSeconds: 0,
          onGapTimeout: 'park',
          metrics: false,
        },
        async () => 'applied',
      );
      const delivery = {
        id: randomUUID(),
        'detail-type': 'RoleTested',
        source: 'test.roles',
        detail: {
          metadata: {
            eventId: `e-${sequence}`,
            aggregateType: 'order',
            aggregateId: 'c-1',
            sequence,
            occurredAt: '',
          },
          data: {},
        },
      } as unknown as EventBridgeEvent<string, unknown>;
      return handler(delivery, lambdaContext(10_000)).then(
        (r) => outcomes.push((r as { inbox?: string }).inbox ?? String(r)),
        (e: Error) => outcomes.push(e.name),
      );
    };
    for (const order of ['none', 'ignore-stale', 'wait-for-gap'] as const) {
      for (const sequence of [1, 1, 3, 2]) await run(order, sequence);
    }
    expect(outcomes).toEqual([
      ...['applied', 'duplicate', 'applied', 'applied'],
      ...['applied', 'duplicate', 'applied', 'stale'],
      ...['applied', 'duplicate', 'parked', 'applied'],
    ]);
    // A gap that waits: its row is written outside the transaction, and updated on the retry.
    const waiting = inbox(
      { sql: consumer, consumer: 'billing-wait', order: 'wait-for-gap', metrics: false },
      async () => 'applied',
    );
    const ahead = {
      id: randomUUID(),
      'detail-type': 'RoleTested',
      source: 'test.roles',
      detail: {
        metadata: { eventId: 'w-2', aggregateType: 'order', aggregateId: 'w', sequence: 2, occurredAt: '' },
        data: {},
      },
    } as unknown as EventBridgeEvent<string, unknown>;
    for (let i = 0; i < 2; i++) {
      await expect(waiting(ahead, lambdaContext(10_000))).rejects.toMatchObject({ name: 'InboxGapError' });
    }
    const [gap] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from outbox.inbox_gap where consumer = 'billing-wait'`;
    expect(gap?.n).toBe(1);
    // And, as the consumer role, its failure trace: one row, two attempts.
    const [failed] = await db.sql<
      { attempts: number }[]
    >`select attempts from outbox.inbox_failed where consumer = 'billing-wait'`;
    expect(failed?.attempts).toBe(2);
  });

  it('refuses each role what it does not need', async () => {
    expect(await attempt(roles.relay, 'delete from outbox.outbox where true')).toBe('42501');
    expect(await attempt(roles.relay, 'select * from outbox.outbox_aggregate')).toBe('42501');
    expect(await attempt(roles.relay, 'select * from outbox.inbox_message')).toBe('42501');
    expect(await attempt(roles.relay, 'select * from outbox.inbox_failed')).toBe('42501');
    // The monitor counts and prunes failed events; it reads none of them.
    expect(await attempt(roles.monitor, 'select event from outbox.inbox_failed')).toBe('42501');
    expect(await attempt(roles.monitor, "update outbox.outbox set last_error = 'x' where true")).toBe(
      '42501',
    );
    expect(
      await attempt(roles.monitor, 'insert into outbox.inbox_message (consumer, message_key) values (1, 1)'),
    ).toBe('42501');
    expect(await attempt(roles.producer, 'delete from outbox.outbox where true')).toBe('42501');
    expect(await attempt(roles.producer, 'update outbox.outbox set published_at = now() where true')).toBe(
      '42501',
    );
    expect(await attempt(roles.consumer, 'select * from outbox.outbox')).toBe('42501');
    expect(await attempt(roles.relay, 'select * from outbox.outbox_idempotency_key')).toBe('42501');
    expect(await attempt(roles.producer, 'delete from outbox.outbox_idempotency_key where true')).toBe(
      '42501',
    );
    expect(await attempt(roles.consumer, 'select * from outbox.outbox_idempotency_key')).toBe('42501');
    // EXECUTE on the enqueue functions (which run with their owner's rights) is the producer's alone.
    const enqueueCall = `select * from outbox.outbox_enqueue(event_type => 'T', source => 's', aggregate_type => 'a', aggregate_id => '1', payload => '{}')`;
    for (const role of [roles.consumer, roles.relay, roles.monitor]) {
      expect(await attempt(role, enqueueCall), role).toBe('42501');
    }
    // The producer reads no event, not even its own, and writes only through the functions.
    expect(await attempt(roles.producer, 'select payload from outbox.outbox')).toBe('42501');
    expect(await attempt(roles.producer, 'select count(*) from outbox.outbox')).toBe('42501');
    expect(await attempt(roles.producer, 'select * from outbox.outbox_aggregate')).toBe('42501');
    expect(await attempt(roles.producer, 'select * from outbox.outbox_idempotency_key')).toBe('42501');
    expect(
      await attempt(
        roles.producer,
        `insert into outbox.outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload) values ('a', '1', 1, 'T', 's', '{}')`,
      ),
    ).toBe('42501');
    expect(
      await attempt(roles.producer, `update outbox.outbox_aggregate set last_sequence = 0 where true`),
    ).toBe('42501');
    // The helpers are reachable only through the two entry points (no bypassing validation).
    expect(
      await attempt(
        roles.producer,
        `select * from outbox.outbox_enqueue_insert(array['T'], array['s'], array['a'], array['1'], array['{}'::jsonb], null, null, 1)`,
      ),
    ).toBe('42501');
    expect(await attempt(roles.producer, `select outbox.outbox_json_bytes('{}')`)).toBe('42501');
    // The relay changes a row's delivery state, never the event; the monitor reads no payload.
    expect(await attempt(roles.relay, `update outbox.outbox set payload = '{}' where true`)).toBe('42501');
    expect(
      await attempt(roles.relay, `update outbox.outbox set event_type = 'x', source = 'y' where true`),
    ).toBe('42501');
    expect(await attempt(roles.relay, `update outbox.outbox set discarded_at = now() where true`)).toBe(
      '42501',
    );
    expect(await attempt(roles.monitor, 'select payload from outbox.outbox')).toBe('42501');
    expect(await attempt(roles.monitor, 'select trace_header from outbox.outbox')).toBe('42501');
    expect(await attempt(roles.monitor, 'select * from outbox.outbox')).toBe('42501');
    // A login the deployment did not create gets nothing.
    const stranger = `stranger_${randomUUID().slice(0, 8)}`;
    // With USAGE on the schema, as any role has where PUBLIC's schema privileges were kept.
    await db.sql.unsafe(
      `create role ${stranger} login password 'stranger'; grant usage on schema public to ${stranger}`,
    );
    try {
      const url = new URL(testRoles.urlOf(roles.relay));
      url.username = stranger;
      url.password = 'stranger';
      const sql = postgres(url.toString(), { max: 1, onnotice: () => {} });
      const error = await sql.unsafe(enqueueCall).catch((e: unknown) => e);
      await sql.end();
      expect(error).toMatchObject({ code: '42501' });
    } finally {
      await db.sql.unsafe(`drop owned by ${stranger}; drop role ${stranger}`);
    }
  });

  it('lets the producer enqueue through every path with no privilege on any table: keys, duplicates, typed errors', async () => {
    await db.sql`truncate outbox.outbox, outbox_aggregate, outbox_idempotency_key`;
    const producer = as(roles.producer);
    const [privileges] = await db.sql<{ any: boolean }[]>`
      select bool_or(has_table_privilege(${roles.producer}, t, p)) as any
      from unnest(array['outbox', 'outbox_aggregate', 'outbox_idempotency_key']) as t,
           unnest(array['select', 'insert', 'update', 'delete']) as p`;
    expect(privileges?.any).toBe(false);
    // A repeated key inside one call, and one already known.
    const results = await producer.begin((tx) =>
      enqueueMany(tx, [
        { ...event('k-1', 1), idempotencyKey: 'k' },
        { ...event('k-1', 2), idempotencyKey: 'k' },
        event('k-1', 3),
      ]),
    );
    expect(results.map((r) => [r.sequence, r.duplicate])).toEqual([
      ['1', false],
      ['1', true],
      ['2', false],
    ]);
    const again = await producer.begin((tx) => enqueue(tx, { ...event('k-1', 4), idempotencyKey: 'k' }));
    expect(again).toMatchObject({ sequence: '1', duplicate: true, eventId: results[0]?.eventId });
    // node-postgres, positional parameters.
    const client = new pg.Client({ connectionString: testRoles.urlOf(roles.producer) });
    await client.connect();
    try {
      await client.query('begin');
      expect(await enqueueWithPg(client, event('k-2', 1))).toMatchObject({ sequence: '1', duplicate: false });
      await client.query('commit');
    } finally {
      await client.end();
    }
    // A bad event is still refused with the typed error naming the field (the helpers ran).
    await expect(
      producer.begin(
        (tx) =>
          tx`select * from outbox.outbox_enqueue(event_type => 'T', source => 'aws.nope', aggregate_type => 'a',
             aggregate_id => '1', payload => '{}'::jsonb)`,
      ),
    ).rejects.toMatchObject({ code: '22023', column_name: 'source' });
    const rows = await db.sql<{ aggregate_id: string; sequence: string }[]>`
      select aggregate_id, sequence from outbox.outbox order by aggregate_id, sequence`;
    expect(rows.map((r) => `${r.aggregate_id}#${r.sequence}`)).toEqual(['k-1#1', 'k-1#2', 'k-2#1']);
  });

  it('keeps the enqueue functions on their own tables whatever the caller puts on its search_path', async () => {
    await db.sql`truncate outbox.outbox, outbox_aggregate, outbox_idempotency_key`;
    const producer = as(roles.producer);
    await producer.begin(async (tx) => {
      // Temporary tables come first on a search_path that does not name pg_temp.
      await tx`create temp table outbox_aggregate (aggregate_type text, aggregate_id text, last_sequence bigint, primary key (aggregate_type, aggregate_id)) on commit drop`;
      await tx`create temp table outbox_idempotency_key (idempotency_key text primary key, event_id uuid, aggregate_type text, aggregate_id text, sequence bigint, created_at timestamptz default now()) on commit drop`;
      await tx`insert into outbox_aggregate values ('order', 'h-1', 41)`;
      await tx`select * from outbox.outbox_enqueue(event_type => 'T', source => 's', aggregate_type => 'order',
                 aggregate_id => 'h-1', payload => '{}'::jsonb, idempotency_key => 'hijack')`;
    });
    const [row] = await db.sql<{ sequence: string; keys: number }[]>`
      select o.sequence, (select count(*)::int from outbox.outbox_idempotency_key where idempotency_key = 'hijack') as keys
      from outbox.outbox o where aggregate_id = 'h-1'`;
    expect(row).toEqual({ sequence: '1', keys: 1 });
  });

  it('lets the relay run every statement of its work: claim, mark, retry, dead-letter, release, renew, hand back, unpark, pending checks', async () => {
    await db.sql`truncate outbox.outbox, outbox_aggregate, outbox_idempotency_key`;
    bus.reset();
    await db.sql.begin((tx) =>
      enqueueMany(tx, [event('s-1', 1), event('s-1', 2), event('s-2', 1), event('s-3', 1)]),
    );
    const relay = as(roles.relay);
    const token = randomUUID();
    const claimed = await claimBatch(relay, claimOptions(token, { deadLetterPolicy: 'block' }));
    expect(claimed).toHaveLength(4);
    const byAggregate = (id: string) => claimed.filter((e) => e.aggregateId === id);
    expect(
      await renewLease(
        relay,
        token,
        claimed.map((e) => e.id),
        30,
      ),
    ).toHaveProperty('size', 4);
    expect(await markPublished(relay, token, [byAggregate('s-1')[0]?.id as string])).toBe(1);
    expect(await startRound(relay, token, [byAggregate('s-1')[1]?.id as string])).toHaveProperty('size', 1);
    expect(
      await releaseUnsent(relay, token, [
        { id: byAggregate('s-1')[1]?.id as string, notBeforeMs: 0, giveBackAttempt: true },
      ]),
    ).toBe(1);
    expect(
      await recordFailures(relay, token, [
        {
          id: byAggregate('s-2')[0]?.id as string,
          error: 'InvalidArgument: x',
          deadLetter: true,
          retryInMs: 0,
        },
      ]),
    ).toHaveProperty('size', 1);
    // s-3, still held
    expect(
      await abandonLease(relay, token, { held: byAggregate('s-3').map((e) => e.id), attemptsBefore: [0] }),
    ).toHaveProperty('size', 1);
    await unparkNextEvents(relay, [{ aggregateType: 'order', aggregateId: 's-1' }]);
    expect(await hasPending(relay, { ordering: 'aggregate', deadLetterPolicy: 'block' })).toBe(true);
    expect(await countHeldBack(relay, { ordering: 'aggregate', deadLetterPolicy: 'block' })).toEqual({
      events: 0,
      aggregates: 0,
    });
    // And whole passes, with a poison event (dead letter) and one that ran out of attempts.
    await db.sql`update outbox.outbox set attempts = 9 where aggregate_id = 's-3'`;
    bus.setFaults({ poisonMarker: '"n":2', poisonCode: 'InvalidArgument' });
    const result = await runRelay({
      sql: relay,
      client: testClient(bus.url),
      settings: testSettings({ maxAttempts: 5 }),
      untilEmpty: true,
      maxConsecutiveErrors: 1,
    });
    bus.setFaults({});
    expect(result).toMatchObject({ published: 0, deadLettered: 2 });
    const states = await db.sql<{ aggregate_id: string; state: string }[]>`
      select aggregate_id || '#' || sequence as aggregate_id,
             case when published_at is not null then 'published' when dead_lettered_at is not null then 'dead' else 'pending' end as state
      from outbox.outbox order by aggregate_id, sequence`;
    expect(states.map((r) => `${r.aggregate_id} ${r.state}`)).toEqual([
      's-1#1 published',
      's-1#2 dead',
      's-2#1 dead',
      's-3#1 dead',
    ]);
  });

  it('sets the statement timeout on the role, so clients need no SET (which pins RDS Proxy sessions)', async () => {
    const [row] = await db.sql<{ setconfig: string[] }[]>`
      select s.setconfig from pg_db_role_setting s join pg_roles r on r.oid = s.setrole where r.rolname = ${roles.relay}`;
    expect(row?.setconfig).toEqual([
      'statement_timeout=7000ms',
      'jit=off',
      'plan_cache_mode=force_custom_plan',
      'idle_in_transaction_session_timeout=8000ms',
      'lock_timeout=7000ms',
      'search_path=pg_catalog, outbox, pg_temp',
    ]);
    // A client that sends no startup parameter (as behind RDS Proxy) gets the role's defaults.
    const plain = postgres(testRoles.urlOf(roles.relay), { max: 1, onnotice: () => {} });
    const [current] = await plain<{ t: string; idle: string }[]>`
      select current_setting('statement_timeout') as t,
             current_setting('idle_in_transaction_session_timeout') as idle`;
    await plain.end();
    expect(current).toEqual({ t: '7s', idle: '8s' });
  });

  it('turns JIT off for the relay and the monitor, on the role (no SET, which pins RDS Proxy sessions)', async () => {
    // Their statements are short and run every few hundred ms; a claim priced past
    // jit_above_cost (a large OUTBOX_BATCH_SIZE) compiled itself first at every call, ~30 ms of
    // the database's CPU for a statement of a few.
    for (const role of [roles.relay, roles.monitor]) {
      const login = postgres(testRoles.urlOf(role), { max: 1, onnotice: () => {} });
      const [current] = await login<{ jit: string }[]>`select current_setting('jit') as jit`;
      await login.end();
      expect({ role, jit: current?.jit }).toEqual({ role, jit: 'off' });
    }
  });
});
