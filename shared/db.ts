/**
 * Database connections. One place decides how we talk to Postgres, so the relay, the CLI and the
 * tests all get the same timeouts and type handling.
 */
import postgres from 'postgres';
import { z } from 'zod';
import { parseEnv } from './config.ts';

/** A porsager `postgres` client (a pool) or a transaction from `sql.begin`. */
export type Sql = postgres.Sql;
/** The transaction handle that `sql.begin(async (tx) => …)` passes to its callback. */
export type Tx = postgres.TransactionSql;
/** Anything that runs a query: the pool or a transaction. */
export type Queryable = Sql | Tx;

const dbEnvSchema = z.object({
  DATABASE_URL: z.string().optional(),
  /** Connections in the pool. */
  OUTBOX_DB_POOL_SIZE: z.coerce.number().int().min(1).max(100).default(4),
  /** Seconds to wait for a new connection; far below the Lambda timeout so a dead network fails fast. */
  OUTBOX_DB_CONNECT_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(120).default(5),
  /** Per-statement limit, ms, enforced by the server. */
  OUTBOX_DB_STATEMENT_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(15_000),
});

/** Options for {@link connect}. */
export interface ConnectOptions {
  /** Connection string; else `DATABASE_URL`, else libpq's `PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSWORD`. */
  url?: string;
  /** Pool size. Default `OUTBOX_DB_POOL_SIZE` or 4. */
  max?: number;
  /** Name shown in `pg_stat_activity`. */
  applicationName?: string;
  env?: NodeJS.ProcessEnv;
}

/**
 * Opens a connection pool configured for the outbox: connect and statement timeouts, idle
 * connections closed after 20 s (a Lambda frozen for longer gets fresh ones instead of sockets the
 * server or a NAT already dropped), and notices silenced.
 * @throws {OutboxConfigError} when a `OUTBOX_DB_*` variable is malformed
 */
export function connect(options: ConnectOptions = {}): Sql {
  const env = parseEnv(dbEnvSchema, options.env ?? process.env);
  const url = options.url ?? env.DATABASE_URL;
  const settings: postgres.Options<Record<string, postgres.PostgresType>> = {
    max: options.max ?? env.OUTBOX_DB_POOL_SIZE,
    connect_timeout: env.OUTBOX_DB_CONNECT_TIMEOUT_SECONDS,
    idle_timeout: 20,
    max_lifetime: 60 * 30,
    onnotice: () => {},
    connection: {
      application_name: options.applicationName ?? 'outbox',
      statement_timeout: env.OUTBOX_DB_STATEMENT_TIMEOUT_MS,
    },
  };
  return url ? postgres(url, settings) : postgres(settings);
}

/** The connection string or libpq variables, for tools that take a URL (migrations). */
export function databaseUrlFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.DATABASE_URL) return env.DATABASE_URL;
  if (!env.PGHOST && !env.PGDATABASE && !env.PGUSER) return undefined;
  const user = encodeURIComponent(env.PGUSER ?? 'postgres');
  const password = env.PGPASSWORD ? `:${encodeURIComponent(env.PGPASSWORD)}` : '';
  const host = env.PGHOST ?? 'localhost';
  const port = env.PGPORT ?? '5432';
  return `postgres://${user}${password}@${host}:${port}/${encodeURIComponent(env.PGDATABASE ?? user)}`;
}

/** porsager `postgres` and Node socket error codes that mean "the connection went away", not "the query is wrong". */
const CONNECTION_ERROR_CODES = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * True for failures worth retrying with a fresh connection: a dropped or refused connection, a
 * server shutting down or restarting (SQLSTATE class 08 connection exception, 57P01–57P03), a
 * cancelled statement (57014, statement timeout), a serialisation failure or deadlock (class 40), or
 * the server running short of resources (class 53). Matched on codes, never on message text.
 */
export function isTransientDatabaseError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  if (CONNECTION_ERROR_CODES.has(code)) return true;
  return (
    /^(08|40|53)/.test(code) || code === '57P01' || code === '57P02' || code === '57P03' || code === '57014'
  );
}
