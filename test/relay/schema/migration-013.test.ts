/**
 * Migration 013 on a database that already holds events: the parking index goes while rows are
 * leased and parked, and the relay then publishes every event, in order per aggregate.
 */
import type postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../../../shared/local/bus.ts';
import { connect, type Sql } from '../../../shared/platform/db.ts';
import type { Envelope } from '../../../shared/platform/envelope.ts';
import { relayOnce } from '../../../shared/relay/loop.ts';
import { claimBatch } from '../../../shared/relay/sql/index.ts';
import { applyMigrationFiles, createEmptyDatabase, type EmptyDatabase } from '../../support/db.ts';
import { claimOptions, testClient, testSettings } from '../../support/relay.ts';

let db: EmptyDatabase;
let sql: postgres.Sql;
let relaySql: Sql;
let bus: LocalBus;

/** Applies the migration files whose number is in [from, to], as they are. */
const applyFiles = (from: string, to: string) => applyMigrationFiles(sql, from, to);

beforeAll(async () => {
  db = await createEmptyDatabase();
  sql = db.sql;
  relaySql = connect({ url: db.url, max: 4, env: {} });
  bus = await startLocalBus();
});
afterAll(async () => {
  await relaySql.end({ timeout: 5 });
  await bus.close();
  await db.drop();
});

describe('migration 013 on a database with events', () => {
  it('drops the parking index under leased and parked rows; every event is then published, in order', async () => {
    await applyFiles('001', '011');
    const enqueue = (id: string) => sql`
      select sequence from outbox_enqueue(
        event_type => 'OrderChanged', source => 'shop.orders', aggregate_type => 'order',
        aggregate_id => ${id}, payload => '{}'::jsonb)`;
    for (let i = 0; i < 40; i++) await enqueue('hot');
    for (let i = 0; i < 5; i++) await enqueue(`cold-${i}`);

    // A claim before the upgrade: the hot head and its group leased, its backlog parked.
    const before = await claimBatch(
      relaySql,
      claimOptions(crypto.randomUUID(), { batchSize: 3, perAggregateLimit: 4 }),
    );
    expect(before.map((e) => `${e.aggregateId}#${e.sequence}`).sort()).toEqual([
      'cold-0#1',
      'cold-1#1',
      'hot#1',
      'hot#2',
      'hot#3',
      'hot#4',
    ]);
    const [parked] = await sql<{ n: number }[]>`
      select count(*)::int as n from outbox where available_at > now() + interval '10 seconds'`;
    expect(parked?.n).toBe(35); // hot #6 … #40 (#5 is the next head)

    await applyFiles('012', '013');
    const [index] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_indexes where indexname = 'outbox_pending_by_aggregate_available_idx'`;
    expect(index?.n).toBe(0);

    // The relay that held those rows died: its lease runs out, and so do the parks.
    await sql`update outbox set lease_expires_at = now() - interval '1 second' where lease_expires_at is not null`;
    await sql`update outbox set available_at = now() where available_at > now()`;
    const deps = {
      sql: relaySql,
      client: testClient(bus.url),
      settings: testSettings({ perAggregateLimit: 4 }),
    };
    for (let pass = 0; pass < 30; pass++) if ((await relayOnce(deps)).claimed === 0) break;

    const sequences = new Map<string, number[]>();
    for (const e of bus.events) {
      const m = (e.detail as unknown as Envelope).metadata;
      sequences.set(m.aggregateId, [...(sequences.get(m.aggregateId) ?? []), m.sequence]);
    }
    expect(sequences.get('hot')).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    for (let i = 0; i < 5; i++) expect(sequences.get(`cold-${i}`)).toEqual([1]);
    const [left] = await sql<
      { n: number }[]
    >`select count(*)::int as n from outbox where published_at is null`;
    expect(left?.n).toBe(0);
  });
});
