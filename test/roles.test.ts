/**
 * The deploy-time database roles, each doing its real work logged in as itself: the relay claims
 * and marks, the monitor prunes and counts, the producer enqueues, the consumer runs the inbox.
 * A grant that is missing fails here with 42501, as it would in AWS on every invocation.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inbox } from '../shared/consumer/index.ts';
import { getStatus, prune } from '../shared/operations/index.ts';
import type { OutboxRoles, Sql } from '../shared/platform/index.ts';
import { enqueueMany } from '../shared/producer/index.ts';
import { runRelay } from '../shared/relay/index.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';
import { lambdaContext } from './support/lambda.ts';
import { type LocalBus, startLocalBus } from './support/local-bus.ts';
import { testClient, testSettings } from './support/relay.ts';
import { createTestRoles, type TestRoles } from './support/roles.ts';

let db: TestDatabase;
let bus: LocalBus;
let testRoles: TestRoles;
let roles: OutboxRoles;
beforeAll(async () => {
  db = await createTestDatabase();
  bus = await startLocalBus();
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
    await db.sql`truncate outbox, outbox_aggregate, outbox_idempotency_key`;
    bus.reset();
    const producer = as(roles.producer);
    await producer.begin((tx) => enqueueMany(tx, [event('r-1', 1), event('r-1', 2), event('r-2', 1)]));
    // The same role through the SQL function other languages call, with an idempotency key, twice.
    const viaSql = () =>
      producer.begin(
        (tx) => tx<{ sequence: string; duplicate: boolean }[]>`
          select * from outbox_enqueue(event_type => 'RoleTested', source => 'test.roles',
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
    >`select count(*)::int as n from outbox where published_at is not null`;
    expect(row?.n).toBe(4);
  });

  it("lets the monitor prune expired outbox rows, inbox records, the inbox's order state and idempotency keys, and count the backlog", async () => {
    await db.sql`truncate outbox, outbox_aggregate, inbox_message, inbox_aggregate, inbox_gap, outbox_idempotency_key`;
    await db.sql.begin((tx) =>
      enqueueMany(tx, [{ ...event('p-1', 1), idempotencyKey: 'p-1-key' }, event('p-2', 1), event('p-3', 1)]),
    );
    await db.sql`update outbox_idempotency_key set created_at = now() - interval '60 days'`;
    await db.sql`
      update outbox set published_at = now() - interval '30 days' where aggregate_id = 'p-1'`;
    await db.sql`
      update outbox set dead_lettered_at = now() - interval '60 days' where aggregate_id = 'p-2'`;
    await db.sql`
      insert into inbox_message (consumer, message_key, processed_at)
      values ('billing', 'old', now() - interval '60 days'), ('billing', 'new', now())`;
    // A parked event waits for an operator however old it is: never pruned.
    await db.sql`
      insert into inbox_message (consumer, message_key, processed_at, outcome)
      values ('billing', 'parked', now() - interval '60 days', 'parked')`;
    await db.sql`
      insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence, updated_at)
      values ('billing', 'order', 'quiet', 's', '', 3, now() - interval '60 days'),
             ('billing', 'order', 'busy', 's', '', 9, now())`;
    await db.sql`
      insert into inbox_gap (consumer, message_key, first_seen_at, last_seen_at)
      values ('billing', 'gone', now() - interval '61 days', now() - interval '60 days'),
             ('billing', 'waiting', now(), now())`;

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
      inboxDeleted: 3,
      idempotencyKeysDeleted: 1,
    });
    const status = await getStatus(monitor);
    expect(status).toMatchObject({ pending: 1, deadLettered: 0 });
    const left = await db.sql<{ aggregate_id: string }[]>`select aggregate_id from outbox`;
    expect(left.map((r) => r.aggregate_id)).toEqual(['p-3']);
    const keys = await db.sql<
      { message_key: string }[]
    >`select message_key from inbox_message order by message_key`;
    expect(keys.map((r) => r.message_key)).toEqual(['new', 'parked']);
    const chains = await db.sql<{ aggregate_id: string }[]>`select aggregate_id from inbox_aggregate`;
    expect(chains.map((r) => r.aggregate_id)).toEqual(['busy']);
    const gaps = await db.sql<{ message_key: string }[]>`select message_key from inbox_gap`;
    expect(gaps.map((r) => r.message_key)).toEqual(['waiting']);
    expect(status.inboxParked).toBe(1);
  });

  it('lets the consumer run the inbox, in every order mode, and park an event', async () => {
    await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap`;
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
    >`select count(*)::int as n from inbox_gap where consumer = 'billing-wait'`;
    expect(gap?.n).toBe(1);
  });

  it('refuses each role what it does not need', async () => {
    expect(await attempt(roles.relay, 'delete from outbox where true')).toBe('42501');
    expect(await attempt(roles.relay, 'select * from outbox_aggregate')).toBe('42501');
    expect(await attempt(roles.relay, 'select * from inbox_message')).toBe('42501');
    expect(await attempt(roles.monitor, "update outbox set last_error = 'x' where true")).toBe('42501');
    expect(
      await attempt(roles.monitor, 'insert into inbox_message (consumer, message_key) values (1, 1)'),
    ).toBe('42501');
    expect(await attempt(roles.producer, 'delete from outbox where true')).toBe('42501');
    expect(await attempt(roles.producer, 'update outbox set published_at = now() where true')).toBe('42501');
    expect(await attempt(roles.consumer, 'select * from outbox')).toBe('42501');
    expect(await attempt(roles.relay, 'select * from outbox_idempotency_key')).toBe('42501');
    expect(await attempt(roles.producer, 'delete from outbox_idempotency_key where true')).toBe('42501');
    expect(await attempt(roles.consumer, 'select * from outbox_idempotency_key')).toBe('42501');
    // The function runs with the caller's rights: a role without the producer's grants cannot enqueue.
    expect(
      await attempt(
        roles.consumer,
        `select * from outbox_enqueue(event_type => 'T', source => 's', aggregate_type => 'a', aggregate_id => '1', payload => '{}')`,
      ),
    ).toBe('42501');
  });

  it('sets the statement timeout on the role, so clients need no SET (which pins RDS Proxy sessions)', async () => {
    const [row] = await db.sql<{ setconfig: string[] }[]>`
      select s.setconfig from pg_db_role_setting s join pg_roles r on r.oid = s.setrole where r.rolname = ${roles.relay}`;
    expect(row?.setconfig).toEqual(['statement_timeout=7000ms']);
    // A client that sends no startup parameter (as behind RDS Proxy) gets the role's default.
    const plain = postgres(testRoles.urlOf(roles.relay), { max: 1, onnotice: () => {} });
    const [current] = await plain<{ t: string }[]>`select current_setting('statement_timeout') as t`;
    await plain.end();
    expect(current?.t).toBe('7s');
  });
});
