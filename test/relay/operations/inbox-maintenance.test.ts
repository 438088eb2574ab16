/**
 * A consumer whose inbox lives in a database of its own (docs/consumer-operations.md#a-consumer-in-its-own-database):
 * no monitor prunes it or counts its parked events there. `outbox inbox prune` and `outbox inbox
 * metrics` (and `maintainInbox`, for a scheduled function) do, as the monitor role of that
 * database, touching only the inbox tables: here the role may not even read the outbox's.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Sql } from '../../../shared/platform/index.ts';
import { maintainInbox } from '../../../shared/relay/operations/index.ts';
import { runCli } from '../../support/cli.ts';
import { createTestDatabase, type TestDatabase } from '../../support/db.ts';
import { createTestRoles, type TestRoles } from '../../support/roles.ts';

let db: TestDatabase;
let testRoles: TestRoles;
let monitorSql: Sql;

beforeAll(async () => {
  db = await createTestDatabase();
  testRoles = await createTestRoles(db);
  // The consumer's database: `outbox migrate --roles` made the outbox's tables too, but nothing
  // of the outbox runs here; the maintenance must not need them.
  await db.sql.unsafe(
    `revoke all on outbox, outbox_aggregate, outbox_idempotency_key from "${testRoles.roles.monitor}"`,
  );
  monitorSql = testRoles.connectAs(testRoles.roles.monitor);
});
afterAll(async () => {
  await testRoles?.drop();
  await db?.drop();
});

/** Records, chains and gaps of two consumers: some past a 30-day retention, some not, two parked. */
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed`;
  const daysAgo = (d: number) => db.sql`now() - ${`${d} days`}::interval`;
  for (const [consumer, key, outcome, age] of [
    ['billing', 'old-1', 'processed', 40],
    ['billing', 'old-2', 'stale', 45],
    ['billing', 'new-1', 'processed', 1],
    ['billing', 'parked-old', 'parked', 60],
    ['billing', 'parked-new', 'parked', 2],
    ['payments', 'old-3', 'processed', 31],
  ] as const) {
    await db.sql`insert into inbox_message (consumer, message_key, outcome, processed_at)
                 values (${consumer}, ${key}, ${outcome}, ${daysAgo(age)})`;
  }
  // Chains' own rows (source '') are kept however old; a per-source row of migrations 010 to 017
  // goes once its chain's own row has taken it over.
  await db.sql`insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, source, last_sequence, updated_at)
               values ('billing', 'order', '1', '', 5, ${daysAgo(50)}), ('billing', 'order', '1', 'shop.a', 3, ${daysAgo(50)}),
                      ('billing', 'order', '2', '', 7, ${daysAgo(1)})`;
  await db.sql`insert into inbox_gap (consumer, message_key, first_seen_at, last_seen_at)
               values ('billing', 'gap-old', ${daysAgo(40)}, ${daysAgo(40)})`;
  await db.sql`insert into inbox_failed (consumer, event_id, event, error_name, error_message, last_failed_at)
               values ('billing', 'failed-old', '{}', 'Error', 'x', ${daysAgo(40)})`;
});

const env = () => ({ HOME: process.env.HOME, DATABASE_URL: testRoles.urlOf(testRoles.roles.monitor) });
const left = async () =>
  (await db.sql<{ message_key: string }[]>`select message_key from inbox_message order by message_key`).map(
    (r) => r.message_key,
  );

describe('a consumer in its own database: outbox inbox prune', () => {
  it('the outbox’s prune cannot run there as the monitor role (what the command is for)', async () => {
    const r = await runCli(['prune'], { env: env() });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/permission denied/);
  });

  it('--dry-run counts what is past the retention, per table, and deletes nothing', async () => {
    const r = await runCli(['inbox', 'prune', '--retention-days', '30', '--dry-run'], { env: env() });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /would delete 3 inbox record\(s\), 1 superseded per-source chain state\(s\), 1 wait-for-gap row\(s\) and 1 failure trace\(s\) older than 30 day\(s\)/,
    );
    expect(await left()).toHaveLength(6);
  });

  it('deletes records past the retention (never a parked one), superseded per-source chain rows and gaps, and keeps the rest and every chain', async () => {
    const r = await runCli(['inbox', 'prune', '--json'], {
      env: { ...env(), OUTBOX_INBOX_RETENTION_DAYS: '30' },
    });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({
      deleted: 6,
      complete: true,
      dryRun: false,
      retentionDays: 30,
    });
    expect(await left()).toEqual(['new-1', 'parked-new', 'parked-old']);
    expect(await db.sql`select aggregate_id, source from inbox_aggregate order by aggregate_id`).toEqual([
      { aggregate_id: '1', source: '' },
      { aggregate_id: '2', source: '' },
    ]);
    expect(await db.sql`select * from inbox_gap`).toEqual([]);
    expect(await db.sql`select * from inbox_failed`).toEqual([]);
  });

  it('refuses a retention under 2 days (the setting’s bounds)', async () => {
    const r = await runCli(['inbox', 'prune', '--retention-days', '1'], { env: env() });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--retention-days.*from 2 to 3650/);
    expect(await left()).toHaveLength(6);
  });
});

describe('a consumer in its own database: outbox inbox metrics', () => {
  it('prints InboxParkedCount per consumer as Embedded Metric Format, 0 for one with none', async () => {
    const r = await runCli(['inbox', 'metrics', '--consumer', 'billing', '--consumer', 'payments'], {
      env: env(),
    });
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toEqual([
      {
        _aws: {
          Timestamp: expect.any(Number),
          CloudWatchMetrics: [
            {
              Namespace: 'Outbox',
              Dimensions: [['consumer']],
              Metrics: [{ Name: 'InboxParkedCount', Unit: 'Count' }],
            },
          ],
        },
        consumer: 'billing',
        InboxParkedCount: 2,
      },
      expect.objectContaining({ consumer: 'payments', InboxParkedCount: 0 }),
    ]);
    expect(Math.abs(lines[0]._aws.Timestamp - Date.now())).toBeLessThan(60_000);
    expect(r.stderr).toMatch(/billing 2 parked, payments 0 parked/);
  });

  it('takes the namespace from --namespace or OUTBOX_METRIC_NAMESPACE, and --json prints the counts', async () => {
    const named = await runCli(['inbox', 'metrics', '--consumer', 'billing', '--namespace', 'Shop'], {
      env: env(),
    });
    expect(JSON.parse(named.stdout)._aws.CloudWatchMetrics[0].Namespace).toBe('Shop');
    const fromEnv = await runCli(['inbox', 'metrics', '--consumer', 'billing'], {
      env: { ...env(), OUTBOX_METRIC_NAMESPACE: 'Billing' },
    });
    expect(JSON.parse(fromEnv.stdout)._aws.CloudWatchMetrics[0].Namespace).toBe('Billing');
    const json = await runCli(['inbox', 'metrics', '--consumer', 'billing', '--json'], { env: env() });
    expect(JSON.parse(json.stdout)).toEqual([{ consumer: 'billing', parked: 2 }]);
  });

  it('needs at least one --consumer', async () => {
    const r = await runCli(['inbox', 'metrics'], { env: env() });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--consumer/);
  });
});

describe('maintainInbox: one scheduled run for a scheduled function', () => {
  it('prunes, then writes each consumer’s InboxParkedCount line', async () => {
    const lines: string[] = [];
    const r = await maintainInbox(monitorSql, {
      consumers: ['billing'],
      retentionSeconds: 30 * 86_400,
      namespace: 'Shop',
      write: (line) => lines.push(line),
    });
    expect(r.pruned).toMatchObject({ deleted: 6, complete: true });
    expect(r.parked).toEqual([{ consumer: 'billing', parked: 2 }]);
    expect(lines.map((l) => JSON.parse(l))).toEqual([
      expect.objectContaining({ consumer: 'billing', InboxParkedCount: 2 }),
    ]);
  });
});
