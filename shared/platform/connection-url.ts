/**
 * Which database a connection goes to, in words an operator can act on: the checks on
 * `DATABASE_URL` before anything connects, and the explanation of a connection that failed (where,
 * as whom, why, and which variable to fix). Passwords are never part of a message.
 */
import { userInfo } from 'node:os';
import { CONNECTION_ERROR_CODES } from './connection-errors.ts';
import { OutboxConfigError } from './errors.ts';
import { EnvVar } from './names.ts';

/** What a valid value looks like, for messages. */
const EXAMPLE_URL = 'postgres://user:password@localhost:5432/database';

const SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

/**
 * A connection string split where a password cannot hide: the user info runs to the *last* `@`
 * (a password may hold `@ : / ? #` when it was not percent-encoded, and no host name holds `@`), the
 * hosts from there to the next `/`, `?` or `#`.
 */
interface UrlParts {
  /** `postgres://`, or '' when the value has no scheme. */
  scheme: string;
  /** Everything before the last `@`, or undefined when there is none. */
  userinfo: string | undefined;
  /** Everything after the user info and its `@`. */
  rest: string;
  /** The host list: `host:port`, or several separated by commas. */
  hosts: string;
}

function splitUrl(url: string): UrlParts {
  const scheme = SCHEME.exec(url)?.[0] ?? '';
  const afterScheme = url.slice(scheme.length);
  const at = afterScheme.lastIndexOf('@');
  const rest = at < 0 ? afterScheme : afterScheme.slice(at + 1);
  return {
    scheme,
    userinfo: at < 0 ? undefined : afterScheme.slice(0, at),
    rest,
    hosts: rest.split(/[/?#]/)[0] ?? '',
  };
}

/**
 * The connection string with every password in it replaced by `***`, for messages and logs: the
 * one in the user info, however it is spelled (all of it up to the last `@`, so a password holding
 * `@ / ? #` is hidden whole), a `password=` query parameter, and a libpq `password=` keyword.
 */
export function maskDatabaseUrl(url: string): string {
  const parts = splitUrl(url);
  let user = parts.userinfo;
  if (user !== undefined) {
    const colon = user.indexOf(':');
    if (colon >= 0) user = `${user.slice(0, colon)}:***`;
  }
  const shown = `${parts.scheme}${user === undefined ? '' : `${user}@`}${parts.rest}`;
  return shown
    .replace(/([?&]password=)[^&#]*/gi, '$1***')
    .replace(/(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)/gi, '$1***');
}

/**
 * Shortest secret {@link databasePasswords} returns. A shorter password is too likely to be an
 * ordinary word of the output as well (the embedded Postgres's is `outbox`; `postgres` is common),
 * and removing it would garble every message; messages never hold a password in the first place
 * (the masking above), so the scrub is only a second line of defence.
 */
const MIN_SCRUBBED_LENGTH = 8;

/**
 * The passwords a connection made from `env` could carry, in every spelling they may take in a
 * message (as written and percent-decoded): DATABASE_URL's user info (`user:password`) and its
 * password, its `password=` parameter, and PGPASSWORD; those of at least 8 characters. For
 * {@link redactPasswords}.
 */
export function databasePasswords(
  env: NodeJS.ProcessEnv = process.env,
  url = env[EnvVar.databaseUrl],
): string[] {
  const found = new Set<string>();
  const add = (value: string | undefined) => {
    if (!value) return;
    found.add(value);
    try {
      found.add(decodeURIComponent(value));
    } catch {
      // not percent-encoding: the value as written is the password
    }
  };
  if (url) {
    const { userinfo } = splitUrl(url);
    const colon = userinfo?.indexOf(':') ?? -1;
    if (userinfo !== undefined && colon >= 0) {
      add(userinfo);
      add(userinfo.slice(colon + 1));
    }
    for (const m of url.matchAll(/[?&]password=([^&#]*)/gi)) add(m[1]);
    for (const m of url.matchAll(/\bpassword\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)/gi))
      add(m[1]?.replace(/^'|'$/g, ''));
  }
  add(env[EnvVar.pgPassword]);
  // Longest first, so that a password containing another is replaced whole.
  return [...found].filter((p) => p.length >= MIN_SCRUBBED_LENGTH).sort((a, b) => b.length - a.length);
}

/**
 * `text` with every occurrence of `passwords` replaced by `***`: the last line of defence for text
 * that reaches an output (a driver's message, a log line) and might quote a connection string.
 * Messages built here never hold a password in the first place ({@link maskDatabaseUrl}).
 */
export function redactPasswords(text: string, passwords: readonly string[]): string {
  let out = text;
  for (const p of passwords) if (out.includes(p)) out = out.split(p).join('***');
  return out;
}

/**
 * Removes `passwords` from an error's message and stack (and its causes'), and drops Node's
 * `input` property, which holds the whole string a `new URL()` refused. Returns the same error.
 */
export function redactError<E>(error: E, passwords: readonly string[]): E {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    const e = current as Error & { input?: unknown };
    for (const key of ['message', 'stack'] as const) {
      const text = e[key];
      if (typeof text !== 'string') continue;
      const redacted = redactPasswords(text, passwords);
      if (redacted === text) continue;
      try {
        // Some drivers' errors make these read-only; defineProperty still works on them.
        Object.defineProperty(e, key, { value: redacted, writable: true, configurable: true });
      } catch {
        // not configurable: left as it is
      }
    }
    if ('input' in e) {
      try {
        delete e.input;
      } catch {
        // not configurable: left as it is
      }
    }
    current = e.cause;
  }
  return error;
}

/**
 * Refuses a connection string the driver would misread. Without this check a value such as
 * `localhost:5432` is not a URL to the driver, which then silently connects to its defaults and
 * fails later on something unrelated; and a password holding an unencoded `/`, `?` or `#` ends the
 * host part early (`app:s3cr/et9@host` reads as host `app`, port `s3cr`), so the driver would
 * connect somewhere else and name a piece of the password as the host in its error.
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
  const unencoded = `a user name or password with @ : / ? # , or % in it must be percent-encoded (%40 for @, %2F for /), like ${EXAMPLE_URL} (got ${shown})`;
  const parts = splitUrl(url);
  // porsager reads the hosts after the *first* `@`: a user info holding `@` and `,` would read as several hosts.
  if (parts.userinfo !== undefined && (/[/?#]/.test(parts.userinfo) || /@.*,|,.*@/.test(parts.userinfo))) {
    throw new OutboxConfigError(variable, `is ambiguous: ${unencoded}`);
  }
  // Several hosts (`h1:5432,h2:5432`, which the driver supports) are not a WHATWG URL: check the
  // rest with one placeholder host.
  const single = parts.hosts.includes(',')
    ? `${parts.scheme}${parts.userinfo === undefined ? '' : `${parts.userinfo}@`}multiple-hosts${parts.rest.slice(parts.hosts.length)}`
    : url;
  let parsed: URL;
  try {
    parsed = new URL(single);
  } catch {
    throw new OutboxConfigError(variable, `is an invalid URL: the port must be a number, and ${unencoded}`);
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
export function databaseTarget(
  env: NodeJS.ProcessEnv = process.env,
  url = env[EnvVar.databaseUrl],
): DatabaseTarget {
  const osUser = env.USER ?? env.USERNAME ?? safeOsUser();
  const defaults = {
    host: env[EnvVar.pgHost] || 'localhost',
    port: env[EnvVar.pgPort] || '5432',
    user: env[EnvVar.pgUser] || osUser,
  };
  if (!url) {
    return {
      address: `${defaults.host}:${defaults.port}`,
      database: env[EnvVar.pgDatabase] || defaults.user,
      user: defaults.user,
      from: 'PG variables',
    };
  }
  const { hosts } = splitUrl(url);
  let user = defaults.user;
  let database = '';
  let host = '';
  let port = '';
  try {
    // A URL the check refuses is described from its parts alone: a URL parser would take a piece
    // of an unencoded password for the host or the port.
    checkDatabaseUrl(url);
    const parsed = new URL(hosts.includes(',') ? url.replace(hosts, 'multiple-hosts') : url);
    user = decodeURIComponent(parsed.username) || defaults.user;
    database = decodeURIComponent(parsed.pathname.slice(1));
    host = parsed.hostname || (parsed.searchParams.get('host') ?? '');
    port = parsed.port;
  } catch {
    // checkDatabaseUrl explains a malformed URL; here it is only described.
    const { userinfo } = splitUrl(url);
    if (userinfo) user = userinfo.split(':')[0] || defaults.user;
    const m = /^(.*?)(?::(\d+))?$/.exec(hosts);
    host = m?.[1] ?? '';
    port = m?.[2] ?? '';
  }
  return {
    address: hosts.includes(',') ? hosts : `${host || defaults.host}:${port || defaults.port}`,
    database: database || env[EnvVar.pgDatabase] || user,
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

/** What connected when DATABASE_URL is unset: said by every message that names the connection settings. */
export const PG_VARIABLES_USED =
  "DATABASE_URL is not set, so libpq's PGHOST, PGPORT, PGUSER and PGDATABASE or their defaults were used";

/**
 * How to run another command against the same database as this one, for advice like "run
 * `outbox migrate` first, …": `with the same DATABASE_URL`, or, when DATABASE_URL is unset, with
 * the same PG* variables (saying that they, or libpq's defaults, were used). No trailing period.
 */
export function sameConnectionSettings(env: NodeJS.ProcessEnv = process.env): string {
  return databaseTarget(env).from === 'DATABASE_URL'
    ? 'with the same DATABASE_URL'
    : `with the same PG variables (${PG_VARIABLES_USED})`;
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
  const iam = env[EnvVar.iamAuth] === 'true';
  // With IAM logins the runbook (docs/operations.md, "Connect the CLI to the deployed database")
  // has DATABASE_URL unset: advice to set it would lead away from the deployed database.
  const source =
    target.from === 'DATABASE_URL'
      ? iam
        ? `DATABASE_URL is ${maskDatabaseUrl(env[EnvVar.databaseUrl] ?? '')} and wins over PGHOST, PGPORT and PGUSER: unset DATABASE_URL to log in with IAM to the deployed database.`
        : `DATABASE_URL is ${maskDatabaseUrl(env[EnvVar.databaseUrl] ?? '')}; fix it to point at your Postgres.`
      : iam
        ? `${EnvVar.iamAuth}=true: an IAM token for PGUSER at PGHOST:PGPORT, in AWS_REGION; fix those variables, and keep DATABASE_URL unset.`
        : `${PG_VARIABLES_USED}; set DATABASE_URL, like ${EXAMPLE_URL}.`;
  return [
    `cannot connect to Postgres at ${target.address} (database "${target.database}", user "${target.user}"): ${reason}`,
    ...(cause ? [`  ${cause[0]?.toUpperCase()}${cause.slice(1)}`] : []),
    `  ${source}`,
  ].join('\n');
}
