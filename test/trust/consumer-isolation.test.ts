/**
 * One consumer cannot stall another (issue 43, item 5). Each consumer logs in as its own role
 * (`outbox migrate --roles --consumer billing --consumer shipping`), which touches only its own inbox
 * rows (row-level security, migration 020). Before, such a role held table-level UPDATE and DELETE on
 * the shared inbox tables, which is what LOCK TABLE asks for: billing could `lock table inbox_message
 * in access exclusive mode` and hold it, and every other consumer's next event then failed after its
 * whole budget, without even its failure trace (whose statement reads inbox_message). Now a consumer
 * role's UPDATE is column-level and its deletes go through functions (migration 026): the only table
 * locks it may take are ACCESS SHARE and ROW EXCLUSIVE, which the inbox's own never wait for, and an
 * idle transaction of it ends after its role's `idle_in_transaction_session_timeout`.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { inbox } from '../../shared/consumer/index.ts';
import type { Sql } from '../../shared/platform/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';

const INBOX_TABLES = ['inbox_message', 'inbox_aggregate', 'inbox_gap', 'inbox_failed'] as const;
const LOCK_MODES = [
  'access share',
  'row share',
  'row exclusive',
  'share update exclusive',
  'share',
  'share row exclusive',
  'exclusive',
  'access exclusive',
] as const;
/** The consumer's invocation budget: the Lambda time left when it is invoked, ms. */
const BUDGET_MS = 5_000;

let db: TestDatabase;
let testRoles: TestRoles;
let billing: Sql;
let shipping: Sql;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.sql.unsafe(
    'revoke execute on all functions in schema public from public; revoke all on schema public from public',
  );
  testRoles = await createTestRoles(db, { consumers: ['billing', 'shipping'] });
  billing = testRoles.connectAs(testRoles.consumerRole('billing'));
  shipping = testRoles.connectAs(testRoles.consumerRole('shipping'));
});
afterAll(async () => {
  await testRoles?.drop();
  await db?.drop();
});

type Delivery = EventBridgeEvent<string, unknown>;
const event = (aggregateId: string, sequence: number): Delivery =>
  delivery({ metadata: { eventId: randomUUID(), aggregateId, sequence } });
const eventIdOf = (e: Delivery) => (e.detail as { metadata: { eventId: string } }).metadata.eventId;

/** Delivers `e` to a wait-for-gap inbox of `consumer` on `sql`; its outcome or error name, and how long it took. */
async function deliver(sql: Sql, consumer: string, e: Delivery, fail = false) {
  const handler = inbox(
    { sql, consumer, order: 'wait-for-gap', gapWaitSeconds: 60, metrics: false },
    async () => {
      if (fail) throw new Error('the handler failed');
      return 'applied';
    },
  );
  const started = performance.now();
  const outcome = await handler({ ...e, id: randomUUID() }, lambdaContext(BUDGET_MS)).then(
    (r) => (r as { inbox?: string }).inbox ?? String(r),
    (error: Error) => error.name,
  );
  return { outcome, ms: Math.round(performance.now() - started) };
}

describe('a consumer holding every lock it can take on the inbox tables', () => {
  it("delays no other consumer's event, and the other's failure trace is written", async () => {
    // billing has rows of its own, so that its row locks lock something.
    expect((await deliver(billing, 'billing', event('b-1', 1))).outcome).toBe('applied');
    expect((await deliver(billing, 'billing', event('b-1', 3))).outcome).toBe('InboxGapError');

    // billing takes, in one transaction it then leaves open, every table lock it is allowed, and
    // every row lock on the rows it sees.
    const held = await billing.reserve();
    const taken: Record<string, string[]> = {};
    const refused: Record<string, string> = {};
    try {
      await held`begin`;
      for (const table of INBOX_TABLES) {
        taken[table] = [];
        for (const mode of LOCK_MODES) {
          await held`savepoint s`;
          try {
            await held.unsafe(`lock table ${table} in ${mode} mode nowait`);
            await held`release savepoint s`;
            taken[table].push(mode);
          } catch (error) {
            await held`rollback to savepoint s`;
            refused[`${table}: ${mode}`] = (error as { code?: string }).code ?? String(error);
          }
        }
        await held.unsafe(`select from ${table} for update`);
      }
      console.log('billing took these table locks:', JSON.stringify(taken));

      // shipping's events meanwhile: one applied, one that fails (its trace is written), one that
      // waits for a gap (its gap row is written, and its trace).
      const applied = await deliver(shipping, 'shipping', event('s-1', 1));
      const failing = event('s-2', 1);
      const failed = await deliver(shipping, 'shipping', failing, true);
      const waiting = event('s-1', 3);
      const waited = await deliver(shipping, 'shipping', waiting);
      const again = await deliver(shipping, 'shipping', event('s-1', 2));
      console.log(
        `shipping's events with billing's locks held: applied in ${applied.ms} ms, failed in ${failed.ms} ms, waited in ${waited.ms} ms, next applied in ${again.ms} ms (budget ${BUDGET_MS} ms)`,
      );
      expect({
        applied: applied.outcome,
        failed: failed.outcome,
        waited: waited.outcome,
        again: again.outcome,
      }).toEqual({ applied: 'applied', failed: 'Error', waited: 'InboxGapError', again: 'applied' });
      for (const d of [applied, failed, waited, again]) expect(d.ms).toBeLessThan(1_000);
      const traces = await db.sql<{ event_id: string; error_message: string }[]>`
        select event_id, error_message from inbox_failed where consumer = 'shipping' order by error_message`;
      expect(traces).toEqual([
        { event_id: eventIdOf(waiting), error_message: expect.stringMatching(/#2 was not applied yet/) },
        { event_id: eventIdOf(failing), error_message: 'the handler failed' },
      ]);
      expect(
        await db.sql`select position::int from inbox_gap where consumer = 'shipping' and message_key = ${eventIdOf(waiting)}`,
      ).toEqual([{ position: 3 }]);
    } finally {
      await held`rollback`.catch(() => {});
      held.release();
    }
    // No lock that blocks the inbox's statements: nothing stronger than ROW EXCLUSIVE, on any table.
    // (ROW SHARE, which conflicts only with EXCLUSIVE and ACCESS EXCLUSIVE, is refused on Postgres 15
    // and taken on the embedded server's newer major, which allows it with column-level UPDATE.)
    const weak = ['access share', 'row share', 'row exclusive'];
    for (const table of INBOX_TABLES) {
      expect({ table, stronger: (taken[table] ?? []).filter((m) => !weak.includes(m)) }).toEqual({
        table,
        stronger: [],
      });
      expect(taken[table]).toContain('row exclusive');
      expect(refused[`${table}: access exclusive`]).toBe('42501');
    }
  });

  it("forgets none of another consumer's rows through the inbox's functions", async () => {
    const failing = event('s-9', 1);
    await deliver(shipping, 'shipping', failing, true);
    const forget = async (statement: Promise<unknown>) =>
      statement.then(
        () => 'done',
        (error: { code?: string }) => error.code,
      );
    expect(
      await forget(billing`select outbox_inbox_forget_failed('shipping', ${eventIdOf(failing)}, null)`),
    ).toBe('42501');
    expect(await forget(billing`select outbox_inbox_forget_gap('shipping', ${eventIdOf(failing)})`)).toBe(
      '42501',
    );
    expect(await db.sql`select 1 from inbox_failed where event_id = ${eventIdOf(failing)}`).toHaveLength(1);
    // its own, yes
    expect(
      await forget(shipping`select outbox_inbox_forget_failed('shipping', ${eventIdOf(failing)}, null)`),
    ).toBe('done');
    expect(await db.sql`select 1 from inbox_failed where event_id = ${eventIdOf(failing)}`).toHaveLength(0);
  });

  it('every consumer and relay role ends an idle transaction and a lock wait on its own', async () => {
    const settings = await db.sql<{ role: string; setting: string[] }[]>`
      select r.rolname as role, s.setconfig as setting
      from pg_db_role_setting s join pg_roles r on r.oid = s.setrole
      where s.setdatabase = 0 and r.rolname = any(${[
        testRoles.roles.relay,
        testRoles.roles.consumer,
        testRoles.consumerRole('billing'),
        testRoles.consumerRole('shipping'),
      ]})`;
    expect(settings).toHaveLength(4);
    for (const { role, setting } of settings) {
      expect({
        role,
        idle: setting.some((s) => s.startsWith('idle_in_transaction_session_timeout=')),
      }).toEqual({
        role,
        idle: true,
      });
      expect({ role, lock: setting.some((s) => s.startsWith('lock_timeout=')) }).toEqual({
        role,
        lock: true,
      });
    }
  });
});
