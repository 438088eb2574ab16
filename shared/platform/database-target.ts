/**
 * Which database a connection goes to, in words an operator can act on: the checks on
 * `DATABASE_URL` before anything connects, and the explanation of a connection that failed (where,
 * as whom, why, and which variable to fix). Passwords are never part of a message.
 */
import { userInfo } from 'node:os';
import { CONNECTION_ERROR_CODES } from './connection-errors.ts';
import { OutboxConfigError } from './errors.ts';

/** What a valid value looks like, for messages. */
const EXAMPLE_URL = 'postgres://user:password@localhost:5432/database';

/** The URL with its password replaced by `***`, for messages and logs. */
export function maskDatabaseUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:@/]*:)[^@/]*@/i, '$1***@');
}

/**
 * Refuses a connection string the driver would misread. Without this check a value such as
 * `localhost:5432` is not a URL to the driver, which then silently connects to its defaults and
 * fails later on something unrelated.
 * @param variable the variable it came from, for the message
 * @throws {OutboxConfigError} naming `variable`, with the reason and what a valid value looks like
 */
export function checkDatabaseUrl(url: string, variable = 'DATABASE_URL'): void {
  const shown = JSON.stringify(maskDatabaseUrl(url));
  if (!/^postgres(ql)?:\/\//i.test(url)) {
    throw new OutboxConfigError(
      variable,
      `must be a postgres:// or postgresql:// URL, like ${EXAMPLE_URL} (got ${shown})`,
    );
  }
  const authority = url.slice(url.indexOf('//') + 2).split(/[/?#]/)[0] ?? '';
  // Several hosts (`h1:5432,h2:5432`, which the driver supports) are not a WHATWG URL: take them as given.
  if (authority.includes(',')) return;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new OutboxConfigError(
      variable,
      `is an invalid URL: the port must be a number, and a user name or password with ` +
        `@ : / ? # or % in it must be percent-encoded (%40 for @), like ${EXAMPLE_URL} (got ${shown})`,
    );
  }
  try {
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
  } catch {
    throw new OutboxConfigError(
      variable,
      `has a user name or password with a % that is not percent-encoding; write % as %25 (got ${shown})`,
    );
  }
}

/** Where a connection goes. */
export interface DatabaseTarget {
  /** `host:port`, or the hosts as written when there are several. */
  address: string;
  database: string;
  user: string;
  /** Where the target came from: the URL, or libpq's `PG*` variables and the defaults. */
  from: 'DATABASE_URL' | 'PG variables';
}

/**
 * The database a connection made from `env` goes to, with the defaults the driver applies
 * (libpq's: `PGHOST` else localhost, `PGPORT` else 5432, `PGUSER` else the OS user, `PGDATABASE`
 * else the user name).
 */
export function databaseTarget(env: NodeJS.ProcessEnv = process.env, url = env.DATABASE_URL): DatabaseTarget {
  const osUser = env.USER ?? env.USERNAME ?? safeOsUser();
  const defaults = {
    host: env.PGHOST || 'localhost',
    port: env.PGPORT || '5432',
    user: env.PGUSER || osUser,
  };
  if (!url) {
    return {
      address: `${defaults.host}:${defaults.port}`,
      database: env.PGDATABASE || defaults.user,
      user: defaults.user,
      from: 'PG variables',
    };
  }
  const authority = url.slice(url.indexOf('//') + 2).split(/[/?#]/)[0] ?? '';
  const hosts = authority.slice(authority.lastIndexOf('@') + 1);
  let user = defaults.user;
  let database = '';
  let host = '';
  let port = '';
  try {
    const parsed = new URL(hosts.includes(',') ? url.replace(hosts, 'multiple-hosts') : url);
    user = decodeURIComponent(parsed.username) || defaults.user;
    database = decodeURIComponent(parsed.pathname.slice(1));
    host = parsed.hostname || (parsed.searchParams.get('host') ?? '');
    port = parsed.port;
  } catch {
    // checkDatabaseUrl explains a malformed URL; here it is only described.
  }
  return {
    address: hosts.includes(',') ? hosts : `${host || defaults.host}:${port || defaults.port}`,
    database: database || env.PGDATABASE || user,
    user,
    from: 'DATABASE_URL',
  };
}

function safeOsUser(): string {
  try {
    return userInfo().username;
  } catch {
    return 'postgres';
  }
}

/**
 * True when `error` means the database could not be reached or refused to let us in: a socket
 * error, a driver connection error, SQLSTATE class 08 (connection exception), class 28 (invalid
 * authorization: unknown role, wrong password), 3D000 (no such database), 57P03 (cannot connect
 * now) or 53300 (too many connections). Matched on codes, never on message text.
 */
export function isConnectFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  return (
    CONNECTION_ERROR_CODES.has(code) ||
    code === 'SASL_SIGNATURE_MISMATCH' ||
    /^(08|28)/.test(code) ||
    code === '3D000' ||
    code === '57P03' ||
    code === '53300'
  );
}

/** What usually lies behind a connection failure's code, and what to check. */
function likelyCause(code: string): string | undefined {
  if (code === 'ECONNREFUSED')
    return 'nothing accepts connections at that address: is the server running, on that port?';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'the host name does not resolve.';
  if (code === 'CONNECT_TIMEOUT' || code === 'ETIMEDOUT' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH')
    return 'no answer (OUTBOX_DB_CONNECT_TIMEOUT_SECONDS): check the host, the port and any firewall.';
  if (code.startsWith('28')) return 'the server refused this user or password.';
  if (code === '3D000')
    return 'the server runs, but that database does not exist (create it, or fix the name).';
  return undefined;
}

/**
 * Explains a failed connection: where it went, as whom, the driver's reason, the likely cause, and
 * which variable to fix. Multi-line; no password.
 * @param error an error for which {@link isConnectFailure} holds
 */
export function describeConnectionFailure(error: unknown, env: NodeJS.ProcessEnv = process.env): string {
  const e = error as { message?: string; code?: string };
  const target = databaseTarget(env);
  const reason = e.message ? `${e.message} (${e.code})` : String(e.code);
  const cause = likelyCause(String(e.code));
  const source =
    target.from === 'DATABASE_URL'
      ? `DATABASE_URL is ${maskDatabaseUrl(env.DATABASE_URL ?? '')}; fix it to point at your Postgres.`
      : `DATABASE_URL is not set, so libpq's PGHOST, PGPORT, PGUSER and PGDATABASE or their defaults ` +
        `were used; set DATABASE_URL, like ${EXAMPLE_URL}.`;
  return [
    `cannot connect to Postgres at ${target.address} (database "${target.database}", user "${target.user}"): ${reason}`,
    ...(cause ? [`  ${cause[0]?.toUpperCase()}${cause.slice(1)}`] : []),
    `  ${source}`,
  ].join('\n');
}
