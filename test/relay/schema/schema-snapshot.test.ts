/**
 * docs/schema.sql is the schema as all migrations leave it (`npm run schema` writes it): it must
 * equal what a freshly migrated database holds, so that it can be read instead of the migrations.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, inject, it } from 'vitest';
import { freshSchema, SCHEMA_FILE } from '../../../scripts/schema.ts';

describe('the schema snapshot', () => {
  it(`${SCHEMA_FILE} is what the migrations make (after a new migration: npm run schema)`, async () => {
    const committed = readFileSync(new URL(`../../../${SCHEMA_FILE}`, import.meta.url), 'utf8');
    const fresh = await freshSchema(inject('databaseUrl'));
    expect(fresh.split('\n')).toEqual(committed.split('\n'));
    // It holds what a reader comes for: the table, the entry points and their pinned search_path.
    expect(fresh).toContain('create table outbox (');
    expect(fresh).toMatch(
      /FUNCTION outbox\.outbox_enqueue\(.*\n(.*\n){3} SET search_path TO 'pg_catalog', 'pg_temp'/,
    );
  });
});
