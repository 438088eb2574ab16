/**
 * Migration 015 claims outbox_enqueue decides every input as migration 014's did, with the same
 * error. Its body now turns the payload into text (`payload::text`) first, before the idempotency
 * key's branch and before the max_entry_bytes refusal, where migration 014 did it only after both.
 * A payload whose text form is over 1 GB (jsonb prints U+0001 as the 6 bytes `\u0001`, so a
 * 180 MB jsonb string is a 1.08 GB text) then fails with 54000 "out of memory" where migration 014
 * answered with the 22023 refusal naming the field (max_entry_bytes, or a field the checker tests
 * before the payload's size on the key's path). Checked by hand on a database at 014 and one at 015.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ max: 1 });
});
afterAll(() => db.drop());

/** The error of a call, as its SQLSTATE and the field it names. */
async function refusal(call: Promise<unknown>): Promise<{ code: string; column: string | undefined }> {
  try {
    await call;
  } catch (error) {
    const e = error as { code: string; column_name?: string };
    return { code: e.code, column: e.column_name };
  }
  throw new Error('the call was not refused');
}

describe('migration 015: errors as migration 014 gave them', () => {
  it('refuses max_entry_bytes 0 as max_entry_bytes, whatever the payload text size', {
    timeout: 120_000,
  }, async () => {
    const error = await refusal(db.sql`
      select * from outbox_enqueue('OrderPlaced', 'shop.orders', 'order', 'o-1',
        jsonb_build_object('a', repeat(chr(1), 180000000)), null, null, 0)`);
    expect(error).toEqual({ code: '22023', column: 'max_entry_bytes' });
  });

  it('refuses a blank event_type with a key as event_type, whatever the payload text size', {
    timeout: 120_000,
  }, async () => {
    const error = await refusal(db.sql`
      select * from outbox_enqueue(' ', 'shop.orders', 'order', 'o-1',
        jsonb_build_object('a', repeat(chr(1), 180000000)), 'key-1')`);
    expect(error).toEqual({ code: '22023', column: 'event_type' });
  });
});
