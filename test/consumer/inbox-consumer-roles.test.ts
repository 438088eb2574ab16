/**
 * Two consumers in one database, each logged in as its own role (`outbox migrate --roles
 * --consumer billing --consumer shipping`): each runs its inbox, and neither can read, change or
 * delete the other's inbox records, order state or gap rows (issue 33). Before, both shared
 * outbox_consumer, and billing could set shipping's processed record to `replaying` (shipping then
 * applied the event again) or rewrite the event a parked replay invokes shipping with. The shared
 * role and the monitor keep every consumer's rows, as before.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { inbox } from '../../shared/consumer/index.ts';
import type { Sql } from '../../shared/platform/index.ts';
import { getStatus, listParked, markParkedForReplay, prune } from '../../shared/relay/operations/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';

let db: TestDatabase;
let testRoles: TestRoles;
let billing: Sql;
let shipping: Sql;

beforeAll(async () => {
  db = await createTestDatabase();
  // PUBLIC's default privileges revoked (a common hardening): each role has only what it is granted.
  await db.sql.unsafe(
    'revoke execute on all functions in schema public from public; revoke all on schema public from public',
  );
  testRoles = await createTestRoles(db, { consumers: ['billing', 'shipping'] });
  await db.sql`create table effect (consumer text not null, event_id text not null)`;
  for (const role of [
    testRoles.consumerRole('billing'),
    testRoles.consumerRole('shipping'),
    testRoles.roles.consumer,
  ]) {
    // The service's own schema and table: its grants, not the outbox's (ensureRoles grants USAGE
    // on schema outbox only, since migration 024).
    await db.sql.unsafe(
      `grant usage on schema public to "${role}"; grant select, insert on effect to "${role}"`,
    );
  }
  billing = testRoles.connectAs(testRoles.consumerRole('billing'));
  shipping = testRoles.connectAs(testRoles.consumerRole('shipping'));
});
afterAll(async () => {
  await testRoles?.drop();
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, effect`;
});

type Delivery = EventBridgeEvent<string, unknown>;

/** The consumer's Lambda handler on `sql`: wait-for-gap, parking after no wait; records its effect. */
const handlerOf = (sql: Sql, consumer: string, gapWaitSeconds = 0) =>
  inbox(
    { sql, consumer, order: 'wait-for-gap', gapWaitSeconds, onGapTimeout: 'park', metrics: false },
    async (_event, { inbox: i }) => {
      await i.tx`insert into effect values (${consumer}, ${i.metadata.eventId})`;
      return 'applied';
    },
  );
const deliver = (sql: Sql, consumer: string, event: Delivery, gapWaitSeconds = 0) =>
  handlerOf(
    sql,
    consumer,
    gapWaitSeconds,
  )({ ...event, id: randomUUID() }, lambdaContext(10_000)).then(
    (r) => (r as { inbox?: string }).inbox ?? String(r),
    (error: Error) => error.name,
  );
const event = (aggregateId: string, sequence: number): Delivery =>
  delivery({ metadata: { eventId: randomUUID(), aggregateId, sequence } });
const eventIdOf = (e: Delivery) => (e.detail as { metadata: { eventId: string } }).metadata.eventId;

/** Runs `statement` on `sql`: the rows it touched, or the SQLSTATE it failed with. */
async function attempt(sql: Sql, statement: string): Promise<number | string> {
  try {
    return (await sql.unsafe(statement)).count;
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
}

/** The inbox tables' rows of `consumer`, as the admin (the tables' owner) sees them. */
async function rowsOf(consumer: string) {
  const [row] = await db.sql<{ messages: unknown; chains: unknown; gaps: unknown }[]>`
    select (select json_agg(m order by m.message_key) from inbox_message m where m.consumer = ${consumer}) as messages,
           (select json_agg(a order by a.aggregate_id) from inbox_aggregate a where a.consumer = ${consumer}) as chains,
           (select json_agg(g order by g.message_key) from inbox_gap g where g.consumer = ${consumer}) as gaps`;
  return row;
}

/** Gives shipping a processed record, a parked event, its order state, and a gap row. */
async function shippingHasRows() {
  const processed = event('s-1', 1);
  const parked = event('s-2', 2);
  const waiting = event('s-3', 2);
  expect(await deliver(shipping, 'shipping', processed)).toBe('applied');
  expect(await deliver(shipping, 'shipping', parked)).toBe('parked');
  // A gap that waits (the event fails for Lambda to retry it): its inbox_gap row stays.
  expect(await deliver(shipping, 'shipping', waiting, 60)).toBe('InboxGapError');
  const rows = await rowsOf('shipping');
  expect(rows).toMatchObject({
    messages: expect.arrayContaining([expect.objectContaining({ outcome: 'processed' })]),
    chains: expect.any(Array),
    gaps: [expect.objectContaining({ message_key: eventIdOf(waiting) })],
  });
  return { processed, parked, waiting, rows };
}

describe("a consumer's own role", () => {
  it('runs its own inbox: applies, deduplicates, parks and waits', async () => {
    const [e1, e3] = [event('b-1', 1), event('b-1', 3)];
    expect(await deliver(billing, 'billing', e1)).toBe('applied');
    expect(await deliver(billing, 'billing', e1)).toBe('duplicate');
    expect(await deliver(billing, 'billing', e3)).toBe('parked');
    expect(await deliver(billing, 'billing', event('b-2', 2), 60)).toBe('InboxGapError');
    expect(await deliver(billing, 'billing', event('b-1', 2))).toBe('applied');
    // Its operator commands work as itself: the parked event is listed and marked for replay.
    expect((await listParked(billing, { consumer: 'billing' })).map((p) => p.eventId)).toEqual([
      eventIdOf(e3),
    ]);
    expect(await markParkedForReplay(billing, { consumer: 'billing' })).toHaveLength(1);
    expect(await deliver(billing, 'billing', e3)).toBe('applied');
    const [record] = await db.sql<{ outcome: string; reason: string }[]>`
      select outcome, reason from inbox_message where consumer = 'billing' and event_id = ${eventIdOf(e3)}`;
    expect(record).toMatchObject({
      outcome: 'processed',
      reason: expect.stringMatching(/^parked, then replayed/),
    });
    const [count] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from effect where consumer = 'billing'`;
    expect(count?.n).toBe(3);
  });

  it('keeps a chain per outbox: the first named outbox adopts the chain kept before (migration 031), the other has its own', async () => {
    const [shop, legacy] = [randomUUID(), randomUUID()];
    const named = (outboxId: string | undefined, sequence: number): Delivery =>
      delivery({
        metadata: { eventId: randomUUID(), aggregateId: 'b-9', sequence, ...(outboxId ? { outboxId } : {}) },
      });
    const answers = [];
    for (const [outboxId, n] of [
      [undefined, 1],
      [shop, 2],
      [legacy, 1],
      [legacy, 2],
      [shop, 3],
    ] as const)
      answers.push(await deliver(billing, 'billing', named(outboxId, n)));
    expect(answers).toEqual(Array(5).fill('applied'));
    const chains = await db.sql<{ chain: string; outbox_id: string; last_sequence: string }[]>`
      select chain, outbox_id::text, last_sequence::text from inbox_aggregate
      where consumer = 'billing' and source = '' order by chain`;
    expect(chains).toEqual([
      { chain: '', outbox_id: shop, last_sequence: '3' },
      { chain: `outbox:${legacy}/`, outbox_id: legacy, last_sequence: '2' },
    ]);
    // Its column-level UPDATE of outbox_id reaches its own rows, and only those.
    await shippingHasRows();
    expect(
      await attempt(
        billing,
        `update outbox.inbox_aggregate set outbox_id = outbox_id where consumer = 'billing' and source = ''`,
      ),
    ).toBe(2);
    expect(
      await attempt(
        billing,
        `update outbox.inbox_aggregate set outbox_id = gen_random_uuid() where consumer = 'shipping'`,
      ),
    ).toBe(0);
  });

  it("reads none of another consumer's inbox records, order state or gap rows", async () => {
    await shippingHasRows();
    // shipping's gap left a failure trace too (inbox_failed, migration 019)
    const [traced] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from inbox_failed where consumer = 'shipping'`;
    expect(traced?.n).toBeGreaterThan(0);
    for (const table of ['inbox_message', 'inbox_aggregate', 'inbox_gap', 'inbox_failed']) {
      const [row] = await billing.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table}`);
      expect({ table, n: row?.n }).toEqual({ table, n: 0 });
    }
    expect(await listParked(billing, { consumer: 'shipping' })).toEqual([]);
  });

  it("cannot update or delete another consumer's rows, nor write rows under its name", async () => {
    const { rows } = await shippingHasRows();
    expect(await attempt(billing, "update inbox_message set reason = 'x' where consumer = 'shipping'")).toBe(
      0,
    );
    expect(await attempt(billing, 'update inbox_aggregate set last_sequence = 0 where true')).toBe(0);
    expect(await attempt(billing, "update inbox_gap set first_seen_at = now() - interval '1 day'")).toBe(0);
    // No DELETE at all (it would let the role lock the table, migration 026): the inbox deletes
    // through functions that check whose rows they are (test/trust/consumer-isolation.test.ts).
    expect(await attempt(billing, 'delete from inbox_gap where true')).toBe('42501');
    expect(await attempt(billing, 'delete from inbox_failed where true')).toBe('42501');
    // Nor move its own rows under the other's name (the column is not one it may update, and the
    // policy would refuse the new row), nor insert rows in its name.
    expect(await attempt(billing, "update inbox_message set consumer = 'shipping' where true")).toBe('42501');
    await deliver(billing, 'billing', event('b-9', 1));
    expect(await attempt(billing, "update inbox_message set consumer = 'shipping' where true")).toBe('42501');
    expect(
      await attempt(
        billing,
        "insert into inbox_message (consumer, message_key, outcome) values ('shipping', 'forged', 'processed')",
      ),
    ).toBe('42501');
    expect(
      await attempt(
        billing,
        "insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence) values ('shipping', 'order', 's-1', 'shop.orders', '', 99)",
      ),
    ).toBe('42501');
    expect(
      await attempt(billing, "insert into inbox_gap (consumer, message_key) values ('shipping', 'forged')"),
    ).toBe('42501');
    // And it cannot become the shared role, which sees every consumer: it is not a member of it.
    expect(await attempt(billing, `set role "${testRoles.roles.consumer}"`)).toBe('42501');
    // Nor give itself every row: the policy helper is the owner's (EXECUTE revoked from PUBLIC),
    // and only the tables' owner may change their policies.
    expect(
      await attempt(
        billing,
        `select outbox_inbox_policy('inbox_message', '${testRoles.consumerRole('billing')}', null)`,
      ),
    ).toBe('42501');
    expect(await attempt(billing, 'alter table inbox_message disable row level security')).toBe('42501');
    expect(await attempt(billing, 'create policy mine on inbox_message using (true)')).toBe('42501');
    expect(await rowsOf('shipping')).toEqual(rows);
  });

  it("cannot set another consumer's processed record to replaying: that consumer applies nothing twice", async () => {
    const { processed } = await shippingHasRows();
    expect(
      await attempt(
        billing,
        `update inbox_message set outcome = 'replaying' where consumer = 'shipping' and event_id = '${eventIdOf(processed)}'`,
      ),
    ).toBe(0);
    expect(await markParkedForReplay(billing, { consumer: 'shipping' })).toEqual([]);
    expect(await deliver(shipping, 'shipping', processed)).toBe('duplicate');
    const [count] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from effect where consumer = 'shipping' and event_id = ${eventIdOf(processed)}`;
    expect(count?.n).toBe(1);
  });

  it("cannot rewrite the event another consumer's parked replay is invoked with", async () => {
    const { parked } = await shippingHasRows();
    expect(
      await attempt(
        billing,
        `update inbox_message set event = jsonb_set(event, '{detail,data}', '{"forged": true}') where consumer = 'shipping'`,
      ),
    ).toBe(0);
    // What shipping's operator replays is the event as shipping parked it.
    const [replayed] = await markParkedForReplay(db.sql, { consumer: 'shipping' });
    expect(replayed?.eventId).toBe(eventIdOf(parked));
    expect(replayed?.event.detail).toEqual(parked.detail);
  });
});

describe('the shared consumer role and the monitor', () => {
  it("keep every consumer's rows: the shared role runs any consumer's inbox, the monitor prunes and counts them all", async () => {
    await shippingHasRows();
    const shared = testRoles.connectAs(testRoles.roles.consumer);
    expect(await deliver(shared, 'legacy', event('l-1', 1))).toBe('applied');
    expect(await deliver(shared, 'billing', event('l-1', 2))).toBe('parked');
    expect((await listParked(shared, { consumer: 'shipping' })).length).toBe(1);
    const monitor = testRoles.connectAs(testRoles.roles.monitor);
    expect((await getStatus(monitor)).inboxParked).toBe(2);
    await db.sql`update inbox_message set processed_at = now() - interval '60 days' where outcome = 'processed'`;
    const pruned = await prune(monitor, {
      publishedRetentionSeconds: 7 * 86_400,
      deadLetterRetentionSeconds: 30 * 86_400,
      inboxRetentionSeconds: 30 * 86_400,
      idempotencyKeyRetentionSeconds: 30 * 86_400,
      batchSize: 10,
      timeBudgetMs: 10_000,
    });
    expect(pruned.inboxDeleted).toBe(2);
    const left = await db.sql<{ consumer: string; outcome: string }[]>`
      select consumer, outcome from inbox_message order by consumer, outcome`;
    expect(left).toEqual([
      { consumer: 'billing', outcome: 'parked' },
      { consumer: 'shipping', outcome: 'parked' },
    ]);
  });

  it('writes only the service tables it was granted: an ungranted one fails the invocation, recorded nowhere but the failure trace, until the grant', async () => {
    await db.sql`create table if not exists invoices (order_id text primary key)`;
    const invoicing = inbox(
      { sql: billing, consumer: 'billing', metrics: false },
      async (_event, { inbox: i }) => {
        await i.tx`insert into invoices values (${i.metadata.aggregateId})`;
        return 'invoiced';
      },
    );
    const e = event('inv-1', 1);
    const run = () =>
      invoicing({ ...e, id: randomUUID() }, lambdaContext(10_000)).then(String, (error: { code?: string }) =>
        String(error.code),
      );
    expect(await run()).toBe('42501'); // permission denied for table invoices
    expect(await db.sql`select 1 from inbox_message where event_id = ${eventIdOf(e)}`).toHaveLength(0);
    expect(await db.sql`select error_message from inbox_failed where event_id = ${eventIdOf(e)}`).toEqual([
      { error_message: expect.stringMatching(/permission denied for table invoices/) },
    ]);
    // The grant the docs give (docs/consumer-deploying.md#the-consumers-database-role), to its own role only.
    await db.sql.unsafe(`grant select, insert, update on invoices to "${testRoles.consumerRole('billing')}"`);
    expect(await run()).toBe('invoiced');
    expect(await db.sql`select order_id from invoices`).toEqual([{ order_id: 'inv-1' }]);
    expect(await db.sql`select 1 from inbox_failed where event_id = ${eventIdOf(e)}`).toHaveLength(0);
  });
});
