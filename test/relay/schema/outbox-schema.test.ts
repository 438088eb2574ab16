/**
 * The outbox's schema whatever the database's search_path: a database whose search_path names
 * `outbox_s` is migrated with its roles (what `outbox migrate --roles` and the deploy-time
 * function run), everything lands in schema `outbox` (migration 024: the migrating session starts
 * with its own search_path), and each role then does its work logged in as itself, with PUBLIC's
 * privileges on `public` revoked.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../../../shared/local/bus.ts';
import { connect, type OutboxRoles, type Sql } from '../../../shared/platform/index.ts';
import { enqueueMany } from '../../../shared/producer/index.ts';
import { runRelay } from '../../../shared/relay/index.ts';
import { getStatus, migrateWithRoles, prune } from '../../../shared/relay/operations/index.ts';
import { createEmptyDatabase, type EmptyDatabase } from '../../support/db.ts';
import { testClient, testSettings } from '../../support/relay.ts';

let db: EmptyDatabase;
let bus: LocalBus;
const suffix = randomBytes(4).toString('hex');
const roles: OutboxRoles = {
  relay: `relay_s_${suffix}`,
  monitor: `monitor_s_${suffix}`,
  producer: `producer_s_${suffix}`,
  consumer: `consumer_s_${suffix}`,
};
const pools: Sql[] = [];
const as = (role: string): Sql => {
  const url = new URL(db.url);
  url.username = role;
  url.password = `pw-${suffix}`;
  const pool = connect({ url: url.toString(), max: 2, env: {} });
  pools.push(pool);
  return pool;
};

beforeAll(async () => {
  db = await createEmptyDatabase({ legacyPublic: true });
  bus = await startLocalBus();
  const name = new URL(db.url).pathname.slice(1);
  await db.sql.unsafe(`create schema outbox_s; alter database "${name}" set search_path = outbox_s`);
  await db.sql.unsafe('revoke all on schema public from public');
  await migrateWithRoles(db.url, { roles, statementTimeoutMs: 7_000 });
  for (const role of Object.values(roles))
    await db.sql.unsafe(`alter role "${role}" password 'pw-${suffix}'`);
});
afterAll(async () => {
  for (const pool of pools) await pool.end({ timeout: 1 });
  for (const role of Object.values(roles)) {
    await db?.sql.unsafe(`drop owned by "${role}"; drop role if exists "${role}"`).catch(() => {});
  }
  await db?.drop();
  await bus?.close();
});

describe('the outbox in schema outbox_s', () => {
  it('was migrated into schema outbox, history included; nothing in outbox_s or public', async () => {
    const [where] = await db.sql<{ schema: string; inPublic: string[] }[]>`
      select (select relnamespace::regnamespace::text from pg_class where relname = 'outbox' and relkind = 'r') as schema,
             array(select relname::text from pg_class where relnamespace = 'public'::regnamespace and relkind = 'r'
                   union all select proname::text from pg_proc where pronamespace = 'public'::regnamespace
                   and proname like 'outbox%'
                   union all select relname::text from pg_class where relnamespace = 'outbox_s'::regnamespace) as "inPublic"`;
    expect(where).toEqual({ schema: 'outbox', inPublic: [] });
  });

  it('lets the producer enqueue, the relay publish and the monitor count and prune, each as itself', async () => {
    const events = [1, 2, 3].map((n) => ({
      type: 'SchemaTested',
      source: 'test.schema',
      aggregateType: 'order',
      aggregateId: `s-${n % 2}`,
      payload: { n },
    }));
    const enqueued = await as(roles.producer).begin((tx) => enqueueMany(tx, events));
    expect(enqueued.map((r) => `${r.aggregateId}#${r.sequence}`)).toEqual(['s-1#1', 's-0#1', 's-1#2']);
    const result = await runRelay({
      sql: as(roles.relay),
      client: testClient(bus.url),
      settings: testSettings(),
      untilEmpty: true,
      maxConsecutiveErrors: 1,
    });
    expect(result.published).toBe(3);
    expect(bus.events.map((e) => (e.detail as { data: { n: number } }).data.n).sort()).toEqual([1, 2, 3]);
    const monitor = as(roles.monitor);
    expect(await getStatus(monitor)).toMatchObject({ pending: 0, deadLettered: 0 });
    await db.sql`update outbox.outbox set published_at = now() - interval '30 days'`;
    const pruned = await prune(monitor, {
      publishedRetentionSeconds: 7 * 86_400,
      deadLetterRetentionSeconds: 30 * 86_400,
      inboxRetentionSeconds: 30 * 86_400,
      idempotencyKeyRetentionSeconds: 30 * 86_400,
      batchSize: 10,
      timeBudgetMs: 10_000,
    });
    expect(pruned.publishedDeleted).toBe(3);
  });

  it('lets the consumer write its inbox records', async () => {
    const consumer = as(roles.consumer);
    await consumer`insert into outbox.inbox_message (consumer, message_key) values ('billing', 'k-1')`;
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from outbox.inbox_message`;
    expect(row?.n).toBe(1);
  });
});
