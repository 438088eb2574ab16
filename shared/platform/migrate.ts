/**
 * Schema migrations: the numbered, forward-only SQL files in `migrations/` applied by
 * node-pg-migrate (a maintained runner: a history table, an advisory lock so two deploys cannot
 * migrate at once, all pending files in one transaction).
 */
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import { checkDatabaseUrl, databasePasswords, redactError, redactPasswords } from './connection-url.ts';
import { connect, OUTBOX_SCHEMA } from './db.ts';
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
 * The search_path the migrating session starts with (a startup parameter, for node-pg-migrate's
 * own queries too): the outbox's schema, where the migrations create their objects, then pg_temp.
 * pg_catalog, not named, is searched first. node-pg-migrate's `information_schema.tables` lookup
 * compares `sql_identifier` with an untyped literal, for which pg_catalog has no exact operator: on
 * the admin's default path (`"$user", public`) a producer's planted
 * `public.=(sql_identifier, sql_identifier)` ran as the admin at every migrate (issue 43, item 1).
 */
export const MIGRATE_SEARCH_PATH = `${OUTBOX_SCHEMA}, pg_temp`;

/** node-pg-migrate's advisory lock: the schema's preparation waits for a running migrator too. */
const MIGRATE_LOCK_ID = 7241865325823964n;

/**
 * Prepares the outbox's schema before node-pg-migrate looks at it, in one transaction under the
 * migrator's lock: creates it (owned by the migrating admin) and moves the history table of a
 * release before migration 024 from `public` into it. Refuses a schema of that name owned by a
 * role other than the admin or a superuser, or one another role may create objects in: its
 * objects would be the privileged sessions' (issue 43, item 6).
 */
async function prepareSchema(databaseUrl: string | undefined): Promise<void> {
  const sql = connect({
    ...(databaseUrl ? { url: databaseUrl } : {}),
    max: 1,
    env: databaseUrl ? {} : process.env,
    searchPath: MIGRATE_SEARCH_PATH,
  });
  try {
    await sql.begin(async (tx) => {
      await tx`select pg_catalog.pg_advisory_xact_lock(${MIGRATE_LOCK_ID.toString()}::bigint)`;
      await tx.unsafe(`create schema if not exists ${OUTBOX_SCHEMA}`);
      const [schema] = await tx<{ owner: string; trusted: boolean; writers: string[] }[]>`
        select n.nspowner::regrole::text as owner,
               (n.nspowner = (select oid from pg_catalog.pg_roles where rolname = current_user)
                or (select r.rolsuper from pg_catalog.pg_roles r where r.oid = n.nspowner)) as trusted,
               array(select case when a.grantee = 0 then 'PUBLIC' else a.grantee::regrole::text end
                     from pg_catalog.aclexplode(n.nspacl) a
                     where a.privilege_type = 'CREATE' and a.grantee <> n.nspowner) as writers
        from pg_catalog.pg_namespace n where n.nspname = ${OUTBOX_SCHEMA}::name`;
      if (!schema?.trusted || schema.writers.length > 0) {
        throw new Error(
          `schema ${OUTBOX_SCHEMA} is owned by ${schema?.owner} or writable by ${schema?.writers.join(', ')}: ` +
            'the outbox needs a schema only the admin (or a superuser) owns and may create objects in; ' +
            'drop or rename that schema, or revoke CREATE on it',
        );
      }
      const [history] = await tx<
        { legacy: boolean; owner: string | null; ours: boolean | null; me: string }[]
      >`
        select pg_catalog.to_regclass(${`${OUTBOX_SCHEMA}.${MIGRATIONS_TABLE}`}::text) is null
                 and c.oid is not null as legacy,
               c.relowner::regrole::text as owner,
               c.relkind = 'r'
                 and (c.relowner = (select oid from pg_catalog.pg_roles where rolname = current_user)
                      or (select r.rolsuper from pg_catalog.pg_roles r where r.oid = c.relowner)) as ours,
               current_user::text as me
        from (select) one
        left join pg_catalog.pg_class c on c.oid = pg_catalog.to_regclass(${`public.${MIGRATIONS_TABLE}`}::text)`;
      if (history?.legacy) {
        // The history an install before migration 024 kept in public moves into the outbox's
        // schema, but only a table of the migrating user's: anyone with CREATE on public could
        // plant one, whose rows node-pg-migrate would read as migrations already applied.
        if (!history.ours)
          throw new Error(
            `public.${MIGRATIONS_TABLE} is owned by ${history.owner}, not by ${history.me} (who migrates) ` +
              'nor a superuser: if it is the outbox history of an install before this release, run migrate ' +
              `as its owner (or ALTER TABLE public.${MIGRATIONS_TABLE} OWNER TO ${history.me}); otherwise drop it`,
          );
        await tx.unsafe(`alter table public.${MIGRATIONS_TABLE} set schema ${OUTBOX_SCHEMA}`);
      }
    });
  } finally {
    await sql.end({ timeout: 5 });
  }
}

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
  // node-pg-migrate's client, with the search_path as a startup parameter (options), not a SET.
  const startup = `-c search_path=${MIGRATE_SEARCH_PATH.replaceAll(' ', '')}`;
  try {
    await prepareSchema(databaseUrl);
    applied = await runner({
      databaseUrl: databaseUrl ? { connectionString: databaseUrl, options: startup } : { options: startup },
      dir: MIGRATIONS_DIR,
      migrationsTable: MIGRATIONS_TABLE,
      migrationsSchema: OUTBOX_SCHEMA,
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
