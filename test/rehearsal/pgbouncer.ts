/**
 * PgBouncer in transaction pooling mode, standing in for RDS Proxy's multiplexing: consecutive
 * transactions of one client connection run on different server connections, so any session
 * state a client relies on (SET, session advisory locks, named prepared statements, LISTEN) breaks
 * here as it would behind the proxy. Debian's `pgbouncer` package; `.ci/run` installs it.
 *
 * Client side: plain TCP from the IAM proxy stand-in on loopback, no authentication (the stand-in
 * checked the IAM token). Server side: TLS to Postgres, verifying its certificate with the run's CA.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** A running PgBouncer. */
export interface PgBouncer {
  port: number;
  /** The log so far (warnings such as "got packet from server when not linked" show a protocol fault). */
  log(): Promise<string>;
  stop(): Promise<void>;
}

/** Options of {@link startPgBouncer}. */
export interface PgBouncerOptions {
  port: number;
  /** The Postgres server (TLS). */
  server: { host: string; port: number };
  /** CA that signed the server's certificate. */
  caFile: string;
  /** Users allowed to log in (PgBouncer still wants them listed with auth_type=trust). */
  users: string[];
  /** Server connections per (database, user). Small, so that clients share them. */
  poolSize?: number;
}

/**
 * Starts PgBouncer and waits until it accepts connections.
 * @throws when the `pgbouncer` binary is missing (with the command that installs it)
 */
export async function startPgBouncer(o: PgBouncerOptions): Promise<PgBouncer> {
  const binary = findPgBouncer();
  const dir = await mkdtemp(join(tmpdir(), 'outbox-pgbouncer-'));
  await chmod(dir, 0o755);
  const ca = join(dir, 'ca.crt');
  await writeFile(ca, await readFile(o.caFile), { mode: 0o644 });
  await writeFile(join(dir, 'users.txt'), o.users.map((u) => `"${u}" ""`).join('\n'), { mode: 0o644 });
  const logFile = join(dir, 'pgbouncer.log');
  await writeFile(logFile, '');
  await chmod(logFile, 0o666); // written by PgBouncer, which runs as the postgres user under root
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${o.server.host} port=${o.server.port}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${o.port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'users.txt')}`,
      'pool_mode = transaction',
      `default_pool_size = ${o.poolSize ?? 3}`,
      'max_client_conn = 500',
      'server_tls_sslmode = verify-full',
      `server_tls_ca_file = ${ca}`,
      `logfile = ${logFile}`,
      'log_connections = 0',
      'log_disconnections = 0',
    ].join('\n'),
    { mode: 0o644 },
  );
  // PgBouncer refuses to run as root; -u drops to the postgres user (made by the embedded Postgres).
  const args =
    process.getuid?.() === 0 ? ['-u', 'postgres', join(dir, 'pgbouncer.ini')] : [join(dir, 'pgbouncer.ini')];
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  for (let i = 0; ; i++) {
    let failure: string | undefined;
    if (child.exitCode !== null) failure = `pgbouncer exited: ${stderr || (await readFile(logFile, 'utf8'))}`;
    else if (await accepts(o.port)) break;
    else if (i > 100) failure = `pgbouncer did not start listening on ${o.port}`;
    if (failure) {
      // Nothing is left behind when it does not start: no process, no configuration directory.
      child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
      throw new Error(failure);
    }
    await sleep(50);
  }
  return {
    port: o.port,
    log: () => readFile(logFile, 'utf8'),
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function findPgBouncer(): string {
  for (const candidate of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer']) {
    try {
      execFileSync(candidate, ['--version'], { stdio: 'ignore' });
      return candidate;
    } catch {
      // not there
    }
  }
  throw new Error(
    'pgbouncer is not installed: the rehearsal needs it to stand in for RDS Proxy (Debian: apt-get install -y pgbouncer)',
  );
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}
