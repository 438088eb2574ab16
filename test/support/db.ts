/** A database of its own for each test file, migrated with the real migrations. */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import { inject } from 'vitest';
import { connect, type Sql } from '../../shared/platform/db.ts';
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

/** A database of the test server, with a drop that closes nothing but what it opened. */
async function newDatabase(): Promise<{ url: string; dropDatabase(): Promise<void> }> {
  const serverUrl = inject('databaseUrl');
  const name = `outbox_test_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
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

/** Creates and migrates a fresh database on the test server. */
export async function createTestDatabase(options: { max?: number } = {}): Promise<TestDatabase> {
  const { url, dropDatabase } = await newDatabase();
  await migrate(url);
  const sql = connect({ url, max: options.max ?? 8, env: {} });
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

/** Creates an empty database on the test server. */
export async function createEmptyDatabase(): Promise<EmptyDatabase> {
  const { url, dropDatabase } = await newDatabase();
  const sql = postgres(url, { max: 2, onnotice: () => {} });
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
