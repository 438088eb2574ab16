/**
 * A fresh, migrated database for a bench script that measures against a Postgres server of the
 * user's (`DATABASE_URL`): dropped first if a killed run left it, dropped again by `drop()`.
 */
import postgres from 'postgres';
import { migrate } from '../../shared/platform/migrate.ts';

/** The bench's database: its URL, and an admin connection to the server (WAL, statistics). */
export interface BenchDatabase {
  url: string;
  admin: postgres.Sql;
  /** Drops the database and closes the admin connection. */
  drop(): Promise<void>;
}

/**
 * Creates database `name` on the server `serverUrl` names and applies every migration to it.
 * @throws when the server refuses (the user may not create databases) or a migration fails
 */
export async function createBenchDatabase(serverUrl: string, name: string): Promise<BenchDatabase> {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`drop database if exists ${name} with (force)`);
  await admin.unsafe(`create database ${name}`);
  // The bench's own sessions find the outbox's tables (schema outbox since migration 024) and its
  // own ones unqualified; the relay's, the monitor's and the CLI's set their own search_path.
  await admin.unsafe(`alter database ${name} set search_path = public, outbox`);
  await migrate(url.toString());
  return {
    url: url.toString(),
    admin,
    async drop() {
      await admin.unsafe(`drop database if exists ${name} with (force)`);
      await admin.end();
    },
  };
}
