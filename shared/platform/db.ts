/**
 * Database connections. One place decides how we talk to Postgres, so the relay, the CLI and the
 * tests all get the same timeouts and type handling.
 */
import { isIP } from 'node:net';
import { Signer } from '@aws-sdk/rds-signer';
import postgres from 'postgres';
import { z } from 'zod';
import { parseEnv } from './config.ts';
import { checkDatabaseUrl } from './database-target.ts';
import { OutboxConfigError } from './errors.ts';
import { oneStatementPerConnection } from './pooler.ts';

/** A porsager `postgres` client (a pool) or a transaction from `sql.begin`. */
export type Sql = postgres.Sql;
/** The transaction handle that `sql.begin(async (tx) => …)` passes to its callback. */
export type Tx = postgres.TransactionSql;
/** Anything that runs a query: the pool or a transaction. */
export type Queryable = Sql | Tx;

const dbEnvSchema = z.object({
  DATABASE_URL: z.string().optional(),
  /** Connections in the pool. */
  OUTBOX_DB_POOL_SIZE: z.coerce.number().int().min(1).max(100).describe('connections').default(4),
  /** Seconds to wait for a new connection; far below the Lambda timeout so a dead network fails fast. */
  OUTBOX_DB_CONNECT_TIMEOUT_SECONDS: z.coerce.number().int().min(1).max(120).default(5),
  /** Per-statement limit, ms, enforced by the server. */
  OUTBOX_DB_STATEMENT_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(15_000),
  /** `true`: authenticate with an IAM token (RDS Proxy / RDS IAM auth), over verified TLS. */
  OUTBOX_DB_IAM_AUTH: z.enum(['true', 'false']).default('false'),
  /**
   * `transaction`: the database is reached through a transaction pooler (RDS Proxy, PgBouncer in
   * transaction mode, Supabase's or Neon's pooler): no prepared statements, no startup settings
   * but the application name, one statement in flight per connection. `none`: a direct connection.
   * Default: `transaction` with IAM auth (RDS Proxy), else `none`.
   */
  OUTBOX_DB_POOLER: z.enum(['none', 'transaction']).optional(),
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
 * @throws {OutboxConfigError} when a `OUTBOX_DB_*` variable or the URL is malformed
 */
export function connect(options: ConnectOptions = {}): Sql {
  const processEnv = options.env ?? process.env;
  const env = parseEnv(dbEnvSchema, processEnv);
  const url = options.url ?? env.DATABASE_URL;
  if (url) checkDatabaseUrl(url, options.url ? 'url' : 'DATABASE_URL');
  const max = options.max ?? env.OUTBOX_DB_POOL_SIZE;
  const iam = env.OUTBOX_DB_IAM_AUTH === 'true';
  const pooled = (env.OUTBOX_DB_POOLER ?? (iam ? 'transaction' : 'none')) === 'transaction';
  const settings: postgres.Options<Record<string, postgres.PostgresType>> = {
    max,
    connect_timeout: env.OUTBOX_DB_CONNECT_TIMEOUT_SECONDS,
    idle_timeout: 20,
    max_lifetime: 60 * 30,
    onnotice: () => {},
    // The application name is a startup parameter every pooler tracks (RDS Proxy and PgBouncer
    // pass it on without pinning); any other one (statement_timeout) is refused by PgBouncer
    // (08P01) or pins RDS Proxy, so behind a pooler the statement timeout is the role's default.
    connection: pooled
      ? { application_name: options.applicationName ?? 'outbox' }
      : {
          application_name: options.applicationName ?? 'outbox',
          statement_timeout: env.OUTBOX_DB_STATEMENT_TIMEOUT_MS,
        },
    // Named prepared statements are session state: a pooler runs the next transaction on another
    // server connection, where the statement does not exist (and RDS Proxy pins for them).
    prepare: !pooled,
  };
  if (iam) Object.assign(settings, rdsProxySettings(processEnv));
  const sql = url ? postgres(url, settings) : postgres(settings);
  return pooled ? oneStatementPerConnection(sql, max) : sql;
}

/**
 * Settings for RDS Proxy with IAM authentication:
 * - the password is a fresh IAM token (15 minutes valid) from `@aws-sdk/rds-signer` for every new
 *   connection, signed with the function's role — no secret in the environment;
 * - TLS with certificate verification (the proxy's certificate chains to Amazon's public roots,
 *   which Node trusts);
 * - TLS verified with servername for SNI (never an IP address, which SNI does not allow);
 * - the pooler settings of {@link connect} (no prepared statements, no startup settings but the
 *   application name, one statement per connection).
 */
function rdsProxySettings(
  env: NodeJS.ProcessEnv,
): Partial<postgres.Options<Record<string, postgres.PostgresType>>> {
  const hostname = env.PGHOST;
  const username = env.PGUSER;
  if (!hostname || !username) {
    throw new OutboxConfigError(hostname ? 'PGUSER' : 'PGHOST', 'is required when OUTBOX_DB_IAM_AUTH=true');
  }
  const port = Number(env.PGPORT ?? 5432);
  const signer = new Signer({ hostname, port, username, region: env.AWS_REGION });
  return {
    host: hostname,
    port,
    username,
    database: env.PGDATABASE ?? username,
    password: () => signer.getAuthToken(),
    ssl: { rejectUnauthorized: true, ...(isIP(hostname) ? {} : { servername: hostname }) },
  };
}

/**
 * The connection string or libpq variables, for tools that take a URL (migrations).
 * @throws {OutboxConfigError} when DATABASE_URL is malformed
 */
export function databaseUrlFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.DATABASE_URL) {
    checkDatabaseUrl(env.DATABASE_URL);
    return env.DATABASE_URL;
  }
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

let guardInstalled = false;

/**
 * Keeps a long-running process alive through one known driver fault: when a connection drops while
 * `postgres` fetches its array types on connect, the failed query's promise is never awaited and
 * surfaces as an unhandled rejection, which would end the process. Such a rejection with a
 * transient database error is logged and ignored (the pool reconnects on the next query); any
 * other unhandled rejection still ends the process, as Node does by default.
 */
export function ignoreTransientDriverRejections(log: (message: string) => void): void {
  if (guardInstalled) return;
  guardInstalled = true;
  process.on('unhandledRejection', (reason) => {
    if (isTransientDatabaseError(reason)) {
      log(`database connection lost in the driver (${(reason as { code?: string }).code}); reconnecting`);
      return;
    }
    throw reason;
  });
}
