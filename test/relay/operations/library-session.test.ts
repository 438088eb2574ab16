/**
 * The operations library as docs/operations-library.md shows it: a `postgres` pool of the
 * caller's own, logged in as the admin of a database with the server's default search_path
 * (`"$user", public`), not the test databases' `outbox, public`. The operations' statements name
 * the outbox's tables through the session's search_path; `npm start`'s status line crashed on the
 * admin's default one (42P01, relation "outbox" does not exist) three seconds into every demo.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, OUTBOX_SEARCH_PATH } from '../../../shared/platform/index.ts';
import { enqueue } from '../../../shared/producer/index.ts';
import { getStatus, listDeadLetters } from '../../../shared/relay/operations/index.ts';
import { createEmptyDatabase, type EmptyDatabase } from '../../support/db.ts';

let db: EmptyDatabase;
beforeAll(async () => {
  db = await createEmptyDatabase({ legacyPublic: true });
  await migrate(db.url);
}, 60_000);
afterAll(async () => {
  await db?.drop();
});

describe('the operations library on a pool of the caller', () => {
  it('reads the status and the dead letters as the admin, on the search_path the docs set at connect', async () => {
    const [path] = await db.sql<{ search_path: string }[]>`show search_path`;
    expect(path?.search_path).toBe('"$user", public');
    // The docs' example: the search_path the monitor's and the CLI's sessions have.
    const sql = postgres(db.url, {
      max: 1,
      onnotice: () => {},
      connection: { search_path: OUTBOX_SEARCH_PATH },
    });
    try {
      await sql.begin((tx) =>
        enqueue(tx, {
          type: 'OrderPlaced',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId: '1',
          payload: {},
        }),
      );
      const status = await getStatus(sql);
      expect({ pending: status.pending, deadLettered: status.deadLettered }).toEqual({
        pending: 1,
        deadLettered: 0,
      });
      expect(await listDeadLetters(sql)).toEqual([]);
    } finally {
      await sql.end({ timeout: 1 });
    }
  });
});
