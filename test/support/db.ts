/** A database of its own for each test file, migrated with the real migrations. */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { inject } from 'vitest';
import { connect, type Sql } from '../../shared/platform/db.ts';
import { migrate } from '../../shared/platform/migrate.ts';

/** A migrated database for one test file. */
export interface TestDatabase {
  url: string;
  sql: Sql;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

/** The server's URL with another database name. */
export function withDatabase(serverUrl: string, database: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

/** Creates and migrates a fresh database on the test server. */
export async function createTestDatabase(options: { max?: number } = {}): Promise<TestDatabase> {
  const serverUrl = inject('databaseUrl');
  const name = `outbox_test_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const url = withDatabase(serverUrl, name);
  await migrate(url);
  const sql = connect({ url, max: options.max ?? 8, env: {} });
  return {
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      const a = postgres(serverUrl, { max: 1, onnotice: () => {} });
      await a.unsafe(`drop database if exists ${name} with (force)`);
      await a.end();
    },
  };
}
