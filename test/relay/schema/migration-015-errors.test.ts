/**
 * Migration 015 reordered outbox_enqueue's tests; it must still answer every input with migration
 * 014's error. Its first version turned the payload into text before the idempotency key's branch
 * and the max_entry_bytes refusal, where 014 did it only after both: a payload whose text form is
 * over 1 GB (jsonb prints U+0001 as the 6 bytes `\u0001`, so a 180 MB jsonb string is a 1.08 GB
 * text) then failed with 54000 "out of memory" where 014 answered with the 22023 refusal naming
 * the field (max_entry_bytes, or a field the checker tests before the payload's size on the key's
 * path).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Tx } from '../../../shared/platform/db.ts';
import { createTestDatabase, type TestDatabase } from '../../support/db.ts';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ max: 1 });
});
afterAll(() => db.drop());

/**
 * The error of a statement, as its SQLSTATE and the field it names. Building a payload of 180 MB
 * takes seconds, more on a loaded machine, so the statement runs under a timeout of 100 s
 * rather than the pool's 15 s (whose 57014 would hide the answer).
 */
async function refusal(
  statement: (tx: Tx) => Promise<unknown>,
): Promise<{ code: string; column: string | undefined }> {
  try {
    await db.sql.begin(async (tx) => {
      await tx`set local statement_timeout = '100s'`;
      await statement(tx);
    });
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
    const error = await refusal(
      (tx) => tx`
      select * from outbox_enqueue('OrderPlaced', 'shop.orders', 'order', 'o-1',
        jsonb_build_object('a', repeat(chr(1), 180000000)), null, null, 0)`,
    );
    expect(error).toEqual({ code: '22023', column: 'max_entry_bytes' });
  });

  it('refuses a blank event_type with a key as event_type, whatever the payload text size', {
    timeout: 120_000,
  }, async () => {
    const error = await refusal(
      (tx) => tx`
      select * from outbox_enqueue(' ', 'shop.orders', 'order', 'o-1',
        jsonb_build_object('a', repeat(chr(1), 180000000)), 'key-1')`,
    );
    expect(error).toEqual({ code: '22023', column: 'event_type' });
  });
});
