/**
 * `npm run db`: a local Postgres for the CLI that keeps its data between runs, stops, starts again
 * and is removed; as root (server as the postgres user) and as a normal user, also from a checkout
 * under a directory others cannot enter.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, cp, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../dev/net.ts';
import { runCli } from '../support/cli.ts';

const repo = fileURLToPath(new URL('../..', import.meta.url));
const scratch: string[] = [];
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  for (const dir of scratch) await rm(dir, { recursive: true, force: true });
});

/** Runs `node dev/db.ts …` from `checkout` (as `npm run db -- …` does). */
function db(args: string[], env: NodeJS.ProcessEnv, checkout = repo) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [join(checkout, 'dev', 'db.ts'), ...args], {
      cwd: checkout,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const URL_LINE = /^export DATABASE_URL=(postgres:\/\/postgres:[0-9a-f]{24}@127\.0\.0\.1:(\d+)\/outbox)\n$/;

describe('npm run db', () => {
  it('creates a database that keeps its data through stop and start, serves the CLI, and is removed', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'outbox-local-db-test-'));
    scratch.push(dir);
    await chmod(dir, 0o755); // as root the server runs as the postgres user, which must enter it
    const port = await freePort();
    const env = { OUTBOX_LOCAL_DB_DIR: join(dir, 'db'), OUTBOX_LOCAL_DB_PORT: String(port) };
    cleanups.push(() => db(['remove'], env));

    const first = await db([], env);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(URL_LINE);
    expect(first.stderr).toMatch(/created and started/);
    const url = (URL_LINE.exec(first.stdout) as RegExpExecArray)[1] as string;
    expect(url).toContain(`:${port}/`);

    // The CLI works against it as printed.
    const migrate = await runCli(['migrate'], { env: { DATABASE_URL: url } });
    expect(migrate.code, migrate.stderr).toBe(0);
    expect(migrate.stdout).toMatch(/^applied \d+ migration\(s\)/);
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    await sql`insert into outbox.outbox_aggregate (aggregate_type, aggregate_id, last_sequence) values ('kept', '1', 7)`;
    await sql.end();

    const again = await db(['start'], env);
    expect(again.stderr).toMatch(/already running/);
    expect(again.stdout).toBe(first.stdout);

    const stop = await db(['stop'], env);
    expect(stop.code).toBe(0);
    expect(stop.stdout).toMatch(/stopped; its data stays/);
    expect((await db(['status'], env)).stdout).toMatch(/: stopped/);
    const refused = await runCli(['status'], { env: { DATABASE_URL: url } });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/ECONNREFUSED/);

    const restarted = await db([], env);
    expect(restarted.stderr).toMatch(/ started on 127\.0\.0\.1/);
    expect(restarted.stdout).toBe(first.stdout);
    expect((await db(['url'], env)).stdout.trim()).toBe(url);
    const sql2 = postgres(url, { max: 1, onnotice: () => {} });
    const [row] =
      await sql2`select last_sequence::int as n from outbox.outbox_aggregate where aggregate_type = 'kept'`;
    await sql2.end();
    expect(row?.n).toBe(7);

    const removed = await db(['remove'], env);
    expect(removed.code).toBe(0);
    expect(existsSync(join(dir, 'db'))).toBe(false);
    expect((await db(['status'], env)).stdout).toMatch(/^no local database/);
    const gone = await runCli(['status'], { env: { DATABASE_URL: url } });
    expect(gone.stderr).toMatch(/ECONNREFUSED/);
  }, 120_000);

  it('refuses a bad command or port with exit 2 and its usage', async () => {
    const r = await db(['begin'], {});
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error: unknown command "begin"/);
    expect(r.stderr).toMatch(/usage: npm run db/);
    const p = await db(['--port', '80'], {});
    expect(p.code).toBe(2);
    expect(p.stderr).toMatch(/--port must be a whole number from 1024 to 65535 \(got "80"\)/);
  });

  it('works from a checkout under a directory others cannot enter (as root: the data moves to /var/tmp)', async () => {
    // A checkout under a 0700 directory: dev/ and node_modules (hard links, so the copy is quick).
    const home = await mkdtemp(join(tmpdir(), 'outbox-0700-'));
    scratch.push(home);
    await chmod(home, 0o700);
    const checkout = join(home, 'repo');
    await mkdir(join(checkout, 'dev'), { recursive: true });
    for (const f of ['db.ts', 'local-db.ts', 'net.ts', 'permissions.ts'])
      await cp(join(repo, 'dev', f), join(checkout, 'dev', f));
    await cp(join(repo, 'package.json'), join(checkout, 'package.json'));
    execFileSync('cp', ['-al', join(repo, 'node_modules'), join(checkout, 'node_modules')]);
    const env = { OUTBOX_LOCAL_DB_PORT: String(await freePort()) };
    cleanups.push(() => db(['remove'], env, checkout));

    const r = await db([], env, checkout);
    expect(r.code, r.stderr).toBe(0);
    const root = process.getuid?.() === 0;
    const where = root ? /data in \/var\/tmp\/outbox-relay-db-[0-9a-f]{10} / : /data in \S+\/repo\/\.pgdata /;
    expect(r.stderr).toMatch(where);
    if (root) expect(r.stderr).toMatch(/the postgres user cannot enter/);
    const url = (URL_LINE.exec(r.stdout) as RegExpExecArray)[1] as string;
    const status = await runCli(['migrate'], { env: { DATABASE_URL: url } });
    expect(status.code, status.stderr).toBe(0);

    const dataHome = (/data in (\S+) /.exec(r.stderr) as RegExpExecArray)[1] as string;
    expect((await db(['remove'], env, checkout)).code).toBe(0);
    expect(existsSync(dataHome)).toBe(false);
  }, 120_000);
});
