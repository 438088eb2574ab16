/** A database of its own for each test file, migrated with the real migrations. */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import { inject } from 'vitest';
import { connect, OUTBOX_SCHEMA, type Sql } from '../../shared/platform/db.ts';
import { MIGRATIONS_DIR, migrate } from '../../shared/platform/migrate.ts';

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

/**
 * A database of the test server, with a drop that closes nothing but what it opened. Its default
 * search_path is {@link TEST_ADMIN_SEARCH_PATH} (a test's own sessions find its tables and the
 * outbox's unqualified) unless `searchPath` is false: the trust tests leave the server's
 * (`"$user", public`), as a production database has. The relay's and the monitor's role defaults
 * and the privileged sessions' startup search_path take precedence over it either way.
 */
async function newDatabase(
  searchPath: string | false = TEST_ADMIN_SEARCH_PATH,
): Promise<{ url: string; dropDatabase(): Promise<void> }> {
  const serverUrl = inject('databaseUrl');
  const name = `outbox_test_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  if (searchPath) await admin.unsafe(`alter database ${name} set search_path = ${searchPath}`);
  await admin.end();
  return {
    url: withDatabase(serverUrl, name),
    async dropDatabase() {
      const a = postgres(serverUrl, { max: 1, onnotice: () => {} });
      await a.unsafe(`drop database if exists ${name} with (force)`);
      await a.end();
    },
  };
}

/**
 * The search_path of a test's admin pool: `public` first, where a test creates its service's own
 * tables (orders), then the outbox's schema. Not a privileged session's: the trust tests pass
 * OUTBOX_SEARCH_PATH (`pg_catalog, outbox, pg_temp`), as the relay, monitor and CLI do.
 */
export const TEST_ADMIN_SEARCH_PATH = `public, ${OUTBOX_SCHEMA}`;

/**
 * Creates and migrates a fresh database on the test server.
 * @param options.searchPath the admin pool's search_path (default {@link TEST_ADMIN_SEARCH_PATH})
 */
export async function createTestDatabase(
  options: { max?: number; searchPath?: string } = {},
): Promise<TestDatabase> {
  const { url, dropDatabase } = await newDatabase(options.searchPath === undefined && TEST_ADMIN_SEARCH_PATH);
  await migrate(url);
  const sql = connect({
    url,
    max: options.max ?? 8,
    env: {},
    searchPath: options.searchPath ?? TEST_ADMIN_SEARCH_PATH,
  });
  return {
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      await dropDatabase();
    },
  };
}

/** An empty database (no migrations applied), for a test of an upgrade from an older schema. */
export interface EmptyDatabase {
  url: string;
  /** A pool of 2 connections, notices ignored (`applyMigrationFiles` takes it). */
  sql: postgres.Sql;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

/**
 * Creates an empty database on the test server. By default the files {@link applyMigrationFiles}
 * applies create the outbox in schema `outbox` (created here, first on the database's search_path),
 * so that this version's code, which names that schema, runs against an older schema version (a
 * test of a data migration). `legacyPublic`: the outbox goes into `public`, as releases before
 * migration 024 put it, for a test of the move itself.
 */
export async function createEmptyDatabase(options: { legacyPublic?: boolean } = {}): Promise<EmptyDatabase> {
  const { url, dropDatabase } = await newDatabase(options.legacyPublic ? false : `${OUTBOX_SCHEMA}, public`);
  const sql = postgres(url, { max: 2, onnotice: () => {} });
  if (!options.legacyPublic) await sql.unsafe(`create schema ${OUTBOX_SCHEMA}`);
  return {
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      await dropDatabase();
    },
  };
}

/**
 * Applies the migration files whose three-digit number is in [from, to] (e.g. `'001'`, `'011'`),
 * in order, as they are: each file's text in one simple-query call, outside a transaction, as a
 * test of an upgrade from an older schema needs them (node-pg-migrate would apply them all).
 */
export async function applyMigrationFiles(sql: postgres.Sql, from: string, to: string): Promise<void> {
  for (const f of readdirSync(MIGRATIONS_DIR).sort()) {
    const n = f.slice(0, 3);
    if (f.endsWith('.sql') && n >= from && n <= to)
      await sql.unsafe(readFileSync(join(MIGRATIONS_DIR, f), 'utf8'));
  }
}
