/**
 * Migration 021: outbox_enqueue's validation error points to docs/producing.md, where "Enqueue from
 * SQL" moved (issue 36), and the function keeps its privileges (EXECUTE revoked from PUBLIC by
 * migration 009).
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../support/db.ts';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ max: 1 });
});
afterAll(() => db.drop());

describe('migration 021: the enqueue hint names docs/producing.md', () => {
  it('answers an invalid event with a hint naming docs/producing.md and a heading it has', async () => {
    const error = await db.sql`
      select * from outbox_enqueue(' ', 'shop.orders', 'order', 'o-1', '{}'::jsonb)`.then(
      () => undefined,
      (e: { code: string; column_name?: string; hint?: string }) => e,
    );
    expect(error).toMatchObject({ code: '22023', column_name: 'event_type' });
    expect(error?.hint).toBe(
      'Nothing was written. Fix the event; see docs/producing.md, "Enqueue from SQL: any driver, ORM or language".',
    );
    const heading = /"([^"]+)"/.exec(error?.hint ?? '')?.[1];
    const producing = readFileSync(new URL('../../../docs/producing.md', import.meta.url), 'utf8');
    expect(producing.split('\n')).toContain(`## ${heading}`);
  });

  it('keeps outbox_enqueue_reject out of PUBLIC reach', async () => {
    const [row] = await db.sql`
      select has_function_privilege('public', 'outbox_enqueue_reject(text, text, integer)', 'execute') as public_may`;
    expect(row?.public_may).toBe(false);
  });
});
