/**
 * Migration 014 on a database that already holds aggregates: the counter's last sequence moves to
 * last_sequence + sequence_offset, and every aggregate's numbering (sequence and typeSequence)
 * goes on from where it was, on both enqueue paths, with no gap and no repeat.
 */
import type postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyMigrationFiles, createEmptyDatabase, type EmptyDatabase } from '../../support/db.ts';

let db: EmptyDatabase;
let sql: postgres.Sql;

beforeAll(async () => {
  db = await createEmptyDatabase();
  sql = db.sql;
});
afterAll(() => db.drop());

/** One event through the single-event function. */
const one = (id: string, type: string) => sql<{ sequence: string }[]>`
  select sequence::text from outbox_enqueue(
    event_type => ${type}, source => 'shop.orders', aggregate_type => 'order',
    aggregate_id => ${id}, payload => '{}'::jsonb)`;

/** Two events of one aggregate in one call of the many-events function. */
const two = (id: string, types: [string, string]) => sql<{ sequence: string }[]>`
  select sequence::text from outbox_enqueue_many(
    array[${types[0]}, ${types[1]}]::text[], array['shop.orders', 'shop.orders']::text[],
    array['order', 'order']::text[], array[${id}, ${id}]::text[], array['{}', '{}']::jsonb[])
  order by ord`;

const rows = (id: string) => sql<{ sequence: string; type_sequence: string; event_type: string }[]>`
  select sequence::text, type_sequence::text, event_type from outbox
  where aggregate_type = 'order' and aggregate_id = ${id} order by sequence`;

describe('migration 014 on a database with aggregates', () => {
  it('continues every aggregate numbering across the upgrade, on both paths', async () => {
    await applyMigrationFiles(sql, '001', '013');
    // Before: 'a' through the single path, 'b' through the many path, 'c' through both.
    for (const t of ['Placed', 'Paid', 'Placed']) await one('a', t);
    await two('b', ['Placed', 'Paid']);
    await one('c', 'Placed');
    await two('c', ['Paid', 'Placed']);

    await applyMigrationFiles(sql, '014', '014');
    const [counter] = await sql<{ offset: string }[]>`
      select sequence_offset::text as offset from outbox_aggregate where aggregate_id = 'a'`;
    expect(counter?.offset).toBe('0');

    // After: each path on each kind of aggregate, and one aggregate new since the upgrade.
    expect((await one('a', 'Placed')).map((r) => r.sequence)).toEqual(['4']);
    expect((await two('a', ['Paid', 'Paid'])).map((r) => r.sequence)).toEqual(['5', '6']);
    expect((await one('b', 'Paid')).map((r) => r.sequence)).toEqual(['3']);
    expect((await two('c', ['Placed', 'Paid'])).map((r) => r.sequence)).toEqual(['4', '5']);
    expect((await one('c', 'Paid')).map((r) => r.sequence)).toEqual(['6']);
    expect((await one('d', 'Placed')).map((r) => r.sequence)).toEqual(['1']);
    expect((await two('d', ['Placed', 'Paid'])).map((r) => r.sequence)).toEqual(['2', '3']);

    const seen = (id: string) =>
      rows(id).then((r) => r.map((x) => `${x.sequence}:${x.event_type}#${x.type_sequence}`));
    expect(await seen('a')).toEqual([
      '1:Placed#1',
      '2:Paid#1',
      '3:Placed#2',
      '4:Placed#3',
      '5:Paid#2',
      '6:Paid#3',
    ]);
    expect(await seen('b')).toEqual(['1:Placed#1', '2:Paid#1', '3:Paid#2']);
    expect(await seen('c')).toEqual([
      '1:Placed#1',
      '2:Paid#1',
      '3:Placed#2',
      '4:Placed#3',
      '5:Paid#2',
      '6:Paid#3',
    ]);
    expect(await seen('d')).toEqual(['1:Placed#1', '2:Placed#2', '3:Paid#1']);

    // The counter holds what was handed out: last_sequence as it was, the rest in sequence_offset.
    const counters = await sql<{ id: string; last: string; offset: string }[]>`
      select aggregate_id as id, last_sequence::text as last, sequence_offset::text as offset
      from outbox_aggregate order by aggregate_id`;
    expect(counters).toEqual([
      { id: 'a', last: '3', offset: '3' },
      { id: 'b', last: '2', offset: '1' },
      { id: 'c', last: '3', offset: '3' },
      { id: 'd', last: '1', offset: '2' },
    ]);
  });
});
