/**
 * Migration 020 on a deployment made before it: one shared consumer role (the grants the earlier
 * `ensureRoles` gave outbox_consumer), a monitor role (its column grants on inbox_message) and a
 * login that works as the monitor through membership. After the migration (row-level security on
 * the inbox tables) every one of them keeps every consumer's rows, before and after the next
 * deploy's `ensureRoles`.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { delivery } from '../../../dev/delivery.ts';
import { inbox } from '../../../shared/consumer/index.ts';
import { connect, type Sql } from '../../../shared/platform/db.ts';
import { ensureRoles, getStatus, MONITOR_READS, prune } from '../../../shared/relay/operations/index.ts';
import { applyMigrationFiles, createEmptyDatabase, type EmptyDatabase } from '../../support/db.ts';
import { lambdaContext } from '../../support/lambda.ts';

const suffix = randomBytes(4).toString('hex');
const consumerRole = `legacy_consumer_${suffix}`;
const monitorRole = `legacy_monitor_${suffix}`;
const operator = `legacy_operator_${suffix}`;
let db: EmptyDatabase;
const pools: Sql[] = [];

const as = (role: string): Sql => {
  const url = new URL(db.url);
  url.username = role;
  url.password = 'legacy';
  const pool = connect({ url: url.toString(), max: 1, env: {} });
  pools.push(pool);
  return pool;
};

beforeAll(async () => {
  db = await createEmptyDatabase();
  await applyMigrationFiles(db.sql, '001', '019');
  // The grants of ensureRoles before migration 020, under names of this file's own.
  await db.sql.unsafe(`
    create role ${consumerRole} login password 'legacy';
    create role ${monitorRole} login password 'legacy';
    create role ${operator} login password 'legacy' in role ${monitorRole};
    grant usage on schema outbox to ${consumerRole}, ${monitorRole}, ${operator};
    grant select, insert, update on inbox_message, inbox_aggregate to ${consumerRole};
    grant select, insert, update, delete on inbox_gap, inbox_failed to ${consumerRole};
    grant select (consumer, message_key, outcome, processed_at), delete on inbox_message to ${monitorRole};
    grant select, delete on inbox_aggregate, inbox_gap, inbox_failed to ${monitorRole};
    grant select (${MONITOR_READS.join(', ')}), delete on outbox to ${monitorRole};
    grant select on outbox_aggregate to ${monitorRole};
    grant select, delete on outbox_idempotency_key to ${monitorRole};`);
});
afterAll(async () => {
  for (const pool of pools) await pool.end({ timeout: 1 });
  for (const role of [operator, consumerRole, monitorRole]) {
    await db?.sql.unsafe(`drop owned by ${role}; drop role if exists ${role}`).catch(() => {});
  }
  await db?.drop();
});

const deliver = (sql: Sql, consumer: string, event: EventBridgeEvent<string, unknown>) =>
  inbox(
    { sql, consumer, order: 'wait-for-gap', gapWaitSeconds: 0, onGapTimeout: 'park', metrics: false },
    async () => 'applied',
  )({ ...event, id: randomUUID() }, lambdaContext(10_000)).then(
    (r) => (r as { inbox?: string }).inbox ?? String(r),
    (error: Error) => error.name,
  );
const event = (aggregateId: string, sequence: number) =>
  delivery({ metadata: { eventId: randomUUID(), aggregateId, sequence } });

describe('migration 020 on a deployment with one shared consumer role', () => {
  it("keeps the shared role on every consumer's inbox, and the monitor (and its members) pruning and counting them all", async () => {
    // A record the inbox of that time wrote (today's inbox calls migration 026's functions).
    const before = event('o-1', 1);
    const { eventId } = (before.detail as { metadata: { eventId: string } }).metadata;
    await as(consumerRole)`
      insert into inbox_message (consumer, message_key, event_id, source, event_type, aggregate_type, aggregate_id, sequence)
      values ('billing', ${eventId}, ${eventId}, ${before.source}, ${before['detail-type']}, 'order', 'o-1', 1)`;

    // 020 and the later ones: the monitor's statements below are today's.
    await applyMigrationFiles(db.sql, '020', '999');
    const [rls] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_class
      where relname in ('inbox_message', 'inbox_aggregate', 'inbox_gap', 'inbox_failed') and relrowsecurity`;
    expect(rls?.n).toBe(4);

    const check = async (round: string) => {
      const consumer = as(consumerRole);
      expect(await deliver(consumer, 'billing', before)).toBe('duplicate');
      expect(await deliver(consumer, 'billing', event(`${round}-1`, 1))).toBe('applied');
      expect(await deliver(consumer, 'shipping', event(`${round}-2`, 2))).toBe('parked');
      const [seen] = await consumer<
        { n: number }[]
      >`select count(distinct consumer)::int as n from inbox_message`;
      expect(seen?.n).toBe(2);
      for (const role of [monitorRole, operator]) {
        const [parked] = await db.sql<{ n: number }[]>`
          select count(*)::int as n from inbox_message where outcome = 'parked'`;
        expect({ role, parked: (await getStatus(as(role))).inboxParked }).toEqual({
          role,
          parked: parked?.n,
        });
      }
    };
    await check('after-020');
    // The next deploy's ensureRoles, with the deployment's role names, changes nothing of it.
    await ensureRoles(db.sql, {
      relay: `legacy_relay_${suffix}`,
      monitor: monitorRole,
      producer: `legacy_producer_${suffix}`,
      consumer: consumerRole,
    });
    try {
      await check('after-deploy');
      await db.sql`update inbox_message set processed_at = now() - interval '60 days' where outcome = 'processed'`;
      const pruned = await prune(as(monitorRole), {
        publishedRetentionSeconds: 7 * 86_400,
        deadLetterRetentionSeconds: 30 * 86_400,
        inboxRetentionSeconds: 30 * 86_400,
        idempotencyKeyRetentionSeconds: 30 * 86_400,
        batchSize: 10,
        timeBudgetMs: 10_000,
      });
      expect(pruned.inboxDeleted).toBe(3);
    } finally {
      for (const role of [`legacy_relay_${suffix}`, `legacy_producer_${suffix}`]) {
        await db.sql.unsafe(`drop owned by ${role}; drop role ${role}`);
      }
    }
  });
});
