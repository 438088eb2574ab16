/**
 * Database connections. One place decides how we talk to Postgres, so the relay, the CLI and the
 * tests all get the same timeouts and type handling.
 */
import { isIP } from 'node:net';
import type { Signer } from '@aws-sdk/rds-signer';
import postgres from 'postgres';
import { isTransientDatabaseError } from './connection-errors.ts';
import { checkDatabaseUrl, databasePasswords, redactError } from './connection-url.ts';
import { databaseConfigSchema } from './database-settings.ts';
import { parseEnv } from './env-settings.ts';
import { OutboxConfigError, OutboxDeadlineError } from './errors.ts';
import { EnvVar } from './names.ts';
import { oneStatementPerConnection } from './pooler.ts';

/** A porsager `postgres` client (a pool) or a transaction from `sql.begin`. */
export type Sql = postgres.Sql;
/** The transaction handle that `sql.begin(async (tx) => …)` passes to its callback. */
export type Tx = postgres.TransactionSql;
/** Anything that runs a query: the pool or a transaction. */
export type Queryable = Sql | Tx;

/** Options for {@link connect}. */
export interface ConnectOptions {
  /** Connection string; else `DATABASE_URL`, else libpq's `PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSWORD`. */
  url?: string;
  /** Pool size. Default `OUTBOX_DB_POOL_SIZE` or 4 (see {@link poolSize} for a role's own default). */
  max?: number;
  /** Name shown in `pg_stat_activity`. */
  applicationName?: string;
  /**
   * The sessions' `plan_cache_mode`, a startup parameter on a connection straight to Postgres.
   * Not sent behind a pooler, which refuses or pins on it; there every statement is unnamed, and
   * Postgres plans an unnamed statement at every call anyway. Default: the role's or server's
   * (`auto`: a prepared statement's generic plan after five calls, kept until the next ANALYZE of
   * its tables). The relay's pools use `force_custom_plan` (`RELAY_PLAN_CACHE_MODE`).
   */
  planCacheMode?: 'auto' | 'force_custom_plan';
  /**
   * The sessions' `idle_in_transaction_session_timeout`, ms, a startup parameter on a connection
   * straight to Postgres (behind a pooler it is the role's default: `ensureRoles`). The relay's
   * claim transaction waits for its answer before COMMIT; a relay frozen in between holds its rows
   * locked until the server ends the session. Default: the role's or server's.
   */
  idleInTransactionTimeoutMs?: number;
  /**
   * The sessions' `search_path`, a startup parameter on a connection straight to Postgres (behind
   * a pooler it is the role's default: `ensureRoles` gives the relay and monitor roles
   * {@link OUTBOX_SEARCH_PATH}). Every privileged session (relay, monitor, CLI) passes
   * {@link OUTBOX_SEARCH_PATH}: set at connect, no statement the session runs ever resolves a name
   * through a schema another role can write (issue 43). Default: the role's or server's, for a
   * consumer's pool, which also reaches the service's own tables (the inbox's statements name the
   * outbox schema themselves).
   */
  searchPath?: string;
  env?: NodeJS.ProcessEnv;
}

/** The schema holding the outbox's and the inbox's tables and functions, owned by the admin. */
export const OUTBOX_SCHEMA = 'outbox';

/**
 * The search_path of every privileged session, set when it connects (never with SET, which would
 * pin RDS Proxy sessions): pg_catalog first, so a built-in is never shadowed, then the outbox's
 * schema, in which no role but its owner may create objects; temporary objects last (functions and
 * operators are never looked up there). No schema another role can write is on it: a function,
 * operator or cast a producer planted in `public` or in a schema named after a role is never
 * resolved (test/trust/planting.test.ts).
 */
export const OUTBOX_SEARCH_PATH = `pg_catalog, ${OUTBOX_SCHEMA}, pg_temp`;

/**
 * How long an unused connection stays open, seconds. Longer than the relay's one-minute schedule
 * gap (and than a few minutes of a slower schedule), so a warm Lambda reuses its connections
 * instead of signing a new IAM token and doing a new TLS handshake on every invocation — at scale
 * RDS Proxy refuses bursts of IAM logins ("too many competing requests"). Well under RDS Proxy's
 * default idle client timeout (30 minutes).
 */
export const IDLE_TIMEOUT_SECONDS = 300;

/**
 * Lifetime of a connection, seconds: 10 to 13 minutes, drawn once per pool so that the containers
 * of one function do not all log in again at the same moment. Under the 15 minutes an IAM
 * authentication token is valid, so a connection is always replaced by one with a fresh token
 * before the token, the proxy or a NAT's idle timer would end it. porsager `postgres` ends a
 * connection at its lifetime only once its current query has finished.
 */
export function maxLifetimeSeconds(random: () => number = Math.random): number {
  return Math.round(60 * (10 + random() * 3));
}

/**
 * Opens a connection pool configured for the outbox: connect and statement timeouts, connections
 * kept across warm invocations ({@link IDLE_TIMEOUT_SECONDS}) and recycled before an IAM token
 * expires ({@link maxLifetimeSeconds}), and notices silenced. A connection that died while a
 * Lambda was frozen is replaced on its next use (its first query fails as transient).
 * @throws {OutboxConfigError} when a `OUTBOX_DB_*` variable or the URL is malformed
 */
export function connect(options: ConnectOptions = {}): Sql {
  const processEnv = options.env ?? process.env;
  const env = parseEnv(databaseConfigSchema, processEnv);
  const url = options.url ?? env[EnvVar.databaseUrl];
  if (url) checkDatabaseUrl(url, options.url ? 'url' : EnvVar.databaseUrl);
  const max = options.max ?? env[EnvVar.dbPoolSize];
  const iam = env[EnvVar.iamAuth] === 'true';
  const pooled = (env[EnvVar.dbPooler] ?? (iam ? 'transaction' : 'none')) === 'transaction';
  const settings: postgres.Options<Record<string, postgres.PostgresType>> = {
    max,
    connect_timeout: env[EnvVar.dbConnectTimeoutSeconds],
    idle_timeout: IDLE_TIMEOUT_SECONDS,
    max_lifetime: maxLifetimeSeconds(),
    onnotice: () => {},
    // The application name is a startup parameter every pooler tracks (RDS Proxy and PgBouncer
    // pass it on without pinning); any other one (statement_timeout) is refused by PgBouncer
    // (08P01) or pins RDS Proxy, so behind a pooler the statement timeout is the role's default.
    connection: pooled
      ? { application_name: options.applicationName ?? 'outbox' }
      : {
          application_name: options.applicationName ?? 'outbox',
          statement_timeout: env[EnvVar.dbStatementTimeoutMs],
          ...(options.searchPath ? { search_path: options.searchPath } : {}),
          ...(options.planCacheMode ? { plan_cache_mode: options.planCacheMode } : {}),
          ...(options.idleInTransactionTimeoutMs
            ? { idle_in_transaction_session_timeout: options.idleInTransactionTimeoutMs }
            : {}),
        },
    // Named prepared statements are session state: a pooler runs the next transaction on another
    // server connection, where the statement does not exist (and RDS Proxy pins for them).
    prepare: !pooled,
  };
  if (iam) Object.assign(settings, rdsProxySettings(processEnv));
  else if (!url) Object.assign(settings, libpqSettings(processEnv));
  let sql: Sql;
  try {
    sql = url ? postgres(url, settings) : postgres(settings);
  } catch (error) {
    // The driver parses the URL itself; its TypeError carries the whole URL in `input`.
    throw redactError(error, databasePasswords(processEnv, url));
  }
  return pooled ? oneStatementPerConnection(sql, max) : sql;
}

/**
 * Settings for IAM authentication, to RDS Proxy or straight to an RDS instance or Aurora cluster:
 * - the password is a fresh IAM token (15 minutes valid) from `@aws-sdk/rds-signer` for every new
 *   connection, signed with the function's role — no secret in the environment;
 * - TLS with certificate verification: the proxy's certificate chains to Amazon's public roots,
 *   which Node trusts; an instance's or a cluster's to the Amazon RDS CAs, which Lambda's CA bundle
 *   holds (`NODE_EXTRA_CA_CERTS=/var/runtime/ca-cert.pem`, set by the construct);
 * - TLS verified with servername for SNI (never an IP address, which SNI does not allow);
 * - through the proxy (`OUTBOX_DB_POOLER=transaction`, the default with IAM), the pooler settings of
 *   {@link connect} (no prepared statements, no startup settings but the application name, one
 *   statement per connection); straight to the database (`OUTBOX_DB_POOLER=none`), a session of
 *   its own.
 */
function rdsProxySettings(
  env: NodeJS.ProcessEnv,
): Partial<postgres.Options<Record<string, postgres.PostgresType>>> {
  const hostname = env[EnvVar.pgHost];
  const username = env[EnvVar.pgUser];
  if (!hostname || !username) {
    throw new OutboxConfigError(
      hostname ? EnvVar.pgUser : EnvVar.pgHost,
      `is required when ${EnvVar.iamAuth}=true`,
    );
  }
  const port = Number(env[EnvVar.pgPort] ?? 5432);
  // The signer, and the AWS SDK credential chain under it, load with the first connection that
  // needs a token rather than with this module: a consumer or the CLI on a password never loads
  // the SDK (about 140 ms and 20 MB of RSS at import, `npm run footprint`).
  let signer: Promise<Signer> | undefined;
  return {
    host: hostname,
    port,
    username,
    database: env[EnvVar.pgDatabase] ?? username,
    password: async () => {
      signer ??= import('@aws-sdk/rds-signer').then(
        ({ Signer }) => new Signer({ hostname, port, username, region: env.AWS_REGION }),
      );
      return (await signer).getAuthToken();
    },
    ssl: { rejectUnauthorized: true, ...(isIP(hostname) ? {} : { servername: hostname }) },
  };
}

/**
 * libpq's variables from `env`, given to the driver explicitly: it would otherwise read them from
 * `process.env`, which is not the environment the caller passed (the CLI's, in tests).
 */
function libpqSettings(
  env: NodeJS.ProcessEnv,
): Partial<postgres.Options<Record<string, postgres.PostgresType>>> {
  const settings: Partial<postgres.Options<Record<string, postgres.PostgresType>>> = {};
  if (env[EnvVar.pgHost]) settings.host = env[EnvVar.pgHost];
  if (env[EnvVar.pgPort]) settings.port = Number(env[EnvVar.pgPort]);
  if (env[EnvVar.pgUser]) settings.username = env[EnvVar.pgUser];
  if (env[EnvVar.pgPassword]) settings.password = env[EnvVar.pgPassword];
  if (env[EnvVar.pgDatabase]) settings.database = env[EnvVar.pgDatabase];
  return settings;
}

/**
 * The connection string or libpq variables, for tools that take a URL (migrations).
 * @throws {OutboxConfigError} when DATABASE_URL is malformed
 */
export function databaseUrlFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const url = env[EnvVar.databaseUrl];
  if (url) {
    checkDatabaseUrl(url);
    return url;
  }
  if (!env[EnvVar.pgHost] && !env[EnvVar.pgDatabase] && !env[EnvVar.pgUser]) return undefined;
  const user = encodeURIComponent(env[EnvVar.pgUser] ?? 'postgres');
  const secret = env[EnvVar.pgPassword];
  const password = secret ? `:${encodeURIComponent(secret)}` : '';
  const host = env[EnvVar.pgHost] ?? 'localhost';
  const port = env[EnvVar.pgPort] ?? '5432';
  return `postgres://${user}${password}@${host}:${port}/${encodeURIComponent(env[EnvVar.pgDatabase] ?? user)}`;
}

/**
 * A pool that can be swapped for a fresh one. porsager `postgres` 3.4.9 keeps state on a connection
 * object after its socket died: a write scheduled just before the close stays queued forever (the
 * slot then times out on every reconnect), and `sql.end()` without a timeout waits forever for a
 * query that was already rejected. A statement that got no answer also still holds its connection.
 * After such a failure the relay replaces the whole pool: the old one is ended in the background
 * (its connections are destroyed after {@link ConnectionPool.RETIRE_SECONDS}), the new one connects
 * on first use. Read {@link ConnectionPool.sql} for every statement; do not keep it.
 */
export class ConnectionPool {
  /** Seconds a replaced pool is given to finish its statements before its connections are destroyed. */
  static readonly RETIRE_SECONDS = 2;
  readonly #open: () => Sql;
  #current: Sql;
  #generation = 0;
  #retiring = new Set<Promise<void>>();

  /** @param open creates a pool (e.g. `() => connect(options)`); called now and after each replacement */
  constructor(open: () => Sql) {
    this.#open = open;
    this.#current = open();
  }

  /** The current pool. */
  get sql(): Sql {
    return this.#current;
  }

  /** Counts replacements: pass the value read before a failure to {@link replace}. */
  get generation(): number {
    return this.#generation;
  }

  /**
   * Replaces the pool, unless it was already replaced since `seenGeneration` (another user of the
   * pool met the same failure first). Statements still running on the old pool fail with
   * `CONNECTION_DESTROYED` once its {@link ConnectionPool.RETIRE_SECONDS} are up.
   */
  replace(seenGeneration = this.#generation): void {
    if (seenGeneration !== this.#generation) return;
    const old = this.#current;
    this.#current = this.#open();
    this.#generation++;
    const retiring = old
      .end({ timeout: ConnectionPool.RETIRE_SECONDS })
      .catch(() => {})
      .finally(() => this.#retiring.delete(retiring));
    this.#retiring.add(retiring);
  }

  /**
   * Closes the pool: running statements get `timeoutSeconds` to finish, then the connections are
   * destroyed. Always bounded (porsager's own `end()` without a timeout can wait forever).
   */
  async end(timeoutSeconds = 5): Promise<void> {
    await Promise.all([this.#current.end({ timeout: timeoutSeconds }), ...this.#retiring]);
  }
}

/** A {@link ConnectionPool} over {@link connect}; validates the `OUTBOX_DB_*` variables now. */
export function openPool(options: ConnectOptions = {}): ConnectionPool {
  parseEnv(databaseConfigSchema, options.env ?? process.env);
  return new ConnectionPool(() => connect(options));
}

/** The current pool of a {@link ConnectionPool}, or a plain pool itself. */
export function currentSql(db: Sql | ConnectionPool): Sql {
  return db instanceof ConnectionPool ? db.sql : db;
}

/**
 * Bounds a statement on the client side: resolves or rejects as `work` does, or rejects with an
 * {@link OutboxDeadlineError} after `ms`, or as soon as `signal` aborts. The server's
 * `statement_timeout` cannot help when the server (or a proxy in front of it) has stopped
 * answering, and porsager `postgres` has no timeout of its own once connected. The abandoned
 * statement keeps its connection until the server answers or the connection is destroyed (see
 * {@link ConnectionPool.replace}); it may still run on the server, late.
 * @param operation names the statement in the error, e.g. `claim`
 */
export function withDeadline<T>(
  work: PromiseLike<T>,
  operation: string,
  ms: number,
  signal?: AbortSignal,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      fn();
    };
    const give = (reason: string) => () =>
      settle(() => reject(new OutboxDeadlineError(operation, ms, reason)));
    const onAbort = give('the pass ran out of time');
    // Subscribed first, whatever happens next: an abandoned statement that fails later must not
    // surface as an unhandled rejection.
    work.then(
      (value) => settle(() => resolve(value)),
      (error: unknown) => settle(() => reject(error)),
    );
    const timer = setTimeout(give('statement deadline'), Math.max(0, ms));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The one uncaught exception known to come from porsager `postgres` 3.4.9 (porsager/postgres#1154
 * and #1208, open upstream, not fixed in any release): a write that the driver scheduled with
 * `setImmediate` runs after its connection closed, against a null socket. Typically it is the
 * automatic ROLLBACK of a `sql.begin` transaction whose connection was dropped; the statements it
 * carried were already rejected with `CONNECTION_CLOSED`, so nothing waits for it. Matched on the
 * TypeError's message and its top stack frame (`nextWrite` in the driver's connection.js).
 */
export function isDriverWriteAfterClose(error: unknown): boolean {
  if (!(error instanceof TypeError)) return false;
  if (!/reading 'write'|evaluating 'socket\.write'/.test(error.message)) return false;
  const top = error.stack?.split('\n').find((line) => line.trimStart().startsWith('at ')) ?? '';
  return (
    /\bnextWrite\b/.test(top) && /[\\/]postgres[\\/](?:cjs[\\/]|cf[\\/])?src[\\/]connection\.js/.test(top)
  );
}

let guardInstalled = false;

/**
 * Keeps a long-running process (the CLI's relay, a container) alive through the driver's known
 * faults when a connection drops, instead of patching the installed driver:
 * - an unhandled rejection with a transient database error (a connection lost while the driver
 *   fetches its array types on connect: that promise is never awaited) is logged and ignored;
 * - the uncaught TypeError of {@link isDriverWriteAfterClose} is logged and ignored. The connection
 *   slot it came from may stay broken (the driver does not reset its write queue): the relay
 *   replaces its {@link ConnectionPool} on the connection failure that went with it.
 * Any other unhandled rejection or uncaught exception still ends the process with exit code 1, as
 * Node does by default (unless another `uncaughtException` listener, such as the Lambda runtime's,
 * decides). In AWS Lambda the runtime's own listener ends the process on any uncaught exception,
 * so there the relay avoids the trigger instead: it runs no transactions.
 * @param log receives one line per ignored fault
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
  const onUncaught = (error: Error) => {
    if (isDriverWriteAfterClose(error)) {
      log('database connection closed under a pending driver write (porsager/postgres#1154); ignored');
      return;
    }
    if (process.listenerCount('uncaughtException') > 1) return;
    process.stderr.write(`${error?.stack ?? String(error)}\n`);
    process.exit(1);
  };
  process.on('uncaughtException', onUncaught);
}
