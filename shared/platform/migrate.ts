/**
 * Schema migrations: the numbered, forward-only SQL files in `migrations/` applied by
 * node-pg-migrate (a maintained runner: a history table, an advisory lock so two deploys cannot
 * migrate at once, all pending files in one transaction).
 */
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import { checkDatabaseUrl, databasePasswords, redactError, redactPasswords } from './connection-url.ts';
import { EnvVar } from './names.ts';

/**
 * The folder holding the SQL migrations: `OUTBOX_MIGRATIONS_DIR` when set (the migrate Lambda's
 * bundle carries them in `migrations/` beside its code), else the repository's `migrations/`.
 */
export const MIGRATIONS_DIR =
  process.env[EnvVar.migrationsDir] ?? fileURLToPath(new URL('../../migrations', import.meta.url));

/** History table, named so it cannot collide with the host application's own migration table. */
export const MIGRATIONS_TABLE = 'outbox_migrations';

/**
 * Applies every pending migration, in one transaction, waiting for a concurrent migrator.
 * @param databaseUrl a connection string; when omitted, libpq's `PG*` variables are used
 * @returns the names of the migrations applied now (empty when the schema was current)
 * @throws {OutboxConfigError} when `databaseUrl` is not a URL the drivers read alike (see
 *   `checkDatabaseUrl`), before any connection is tried
 * @throws the database error of the failing migration; nothing is applied then
 */
export async function migrate(
  databaseUrl: string | undefined,
  options: { log?: (line: string) => void } = {},
): Promise<string[]> {
  // node-pg-migrate logs a failed connection with the driver's error inspected whole; neither
  // its lines nor its errors may carry the password.
  const passwords = databasePasswords(process.env, databaseUrl);
  // node-pg-migrate's driver (pg) reads an ambiguous URL's host from inside the password, then
  // prints that host in its lookup error: refuse such a URL here, as connect() does.
  if (databaseUrl !== undefined) checkDatabaseUrl(databaseUrl);
  const log = options.log ?? (() => {});
  let applied: Awaited<ReturnType<typeof runner>>;
  try {
    applied = await runner({
      databaseUrl: databaseUrl ?? {},
      dir: MIGRATIONS_DIR,
      migrationsTable: MIGRATIONS_TABLE,
      direction: 'up',
      singleTransaction: true,
      checkOrder: true,
      advisoryLockMode: 'wait',
      log: (line) => log(redactPasswords(String(line), passwords)),
    });
  } catch (error) {
    throw redactError(error, passwords);
  }
  return applied.map((m) => m.name);
}

/**
 * The numbers below the highest migration that no migration has (`['008', '012']`): numbers that
 * were never released. A new migration takes the next number after the highest, never one of
 * these: a database that ran later ones would refuse it as out of order (`checkOrder`).
 * @param names migration names (`007_outbox_enqueue`) or file names; default: the files in
 *   {@link MIGRATIONS_DIR}
 */
export function unreleasedMigrationNumbers(
  names: string[] = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith('.sql')),
): string[] {
  const numbers = new Set(names.map((n) => Number.parseInt(n.slice(0, 3), 10)).filter(Number.isInteger));
  const highest = Math.max(0, ...numbers);
  const gaps: string[] = [];
  for (let n = 1; n < highest; n++) if (!numbers.has(n)) gaps.push(String(n).padStart(3, '0'));
  return gaps;
}
