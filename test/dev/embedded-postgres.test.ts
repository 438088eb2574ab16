import { execFileSync } from 'node:child_process';
import { chmod, cp, mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../..', import.meta.url));
const scratch: string[] = [];
afterAll(async () => {
  for (const dir of scratch) await rm(dir, { recursive: true, force: true });
});

/** Temp entries this run's launchers may leave behind (data directories, copies of the binaries). */
const leftovers = async (dir = tmpdir()) => (await readdir(dir)).filter((n) => /^outbox-pg-/.test(n)).sort();

describe('embedded Postgres launcher', () => {
  it('starts from a checkout inside a directory that others cannot enter (as root: /root is 0700), and leaves nothing behind', async () => {
    // A checkout under a 0700 directory: the dev tools and node_modules (hard links, so
    // the copy is quick; the directories are new, so they carry the 0700 parent's reach).
    const home = await mkdtemp(join(tmpdir(), 'outbox-0700-'));
    scratch.push(home);
    await chmod(home, 0o700);
    const checkout = join(home, 'repo');
    await mkdir(checkout, { recursive: true });
    await cp(join(repo, 'dev'), join(checkout, 'dev'), { recursive: true });
    await cp(join(repo, 'package.json'), join(checkout, 'package.json'));
    execFileSync('cp', ['-al', join(repo, 'node_modules'), join(checkout, 'node_modules')]);
    // A temp directory of this test's own (open to all, like /tmp): other files of the suite start
    // embedded servers at the same time, and their entries in the shared temp directory would
    // read as this launcher's leftovers.
    const temp = await mkdtemp(join(tmpdir(), 'outbox-launcher-tmp-'));
    scratch.push(temp);
    await chmod(temp, 0o1777);

    const script = `
      import { readdirSync } from 'node:fs';
      import { tmpdir } from 'node:os';
      import postgres from 'postgres';
      import { startEmbeddedPostgres } from './dev/embedded-postgres.ts';
      const db = await startEmbeddedPostgres();
      const sql = postgres(db.url, { max: 1, onnotice: () => {} });
      const [row] = await sql\`select current_setting('server_version_num')::int as v\`;
      await sql.end();
      const whileRunning = readdirSync(tmpdir()).filter((n) => n.startsWith('outbox-pg-')).length;
      await db.stop();
      console.log(JSON.stringify({ ...row, whileRunning }));`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: checkout,
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, TMPDIR: temp },
    });
    const result = JSON.parse(out.trim().split('\n').at(-1) as string);
    expect(result.v).toBeGreaterThanOrEqual(150_000);
    // It did put its data directory and binaries there, and took them away when it stopped.
    expect(result.whileRunning).toBeGreaterThan(0);
    expect(await leftovers(temp)).toEqual([]);
  }, 90_000);

  it('starts with a TMPDIR that others cannot enter (as root, the postgres user must reach its files)', async () => {
    const home = await mkdtemp(join(tmpdir(), 'outbox-private-tmp-'));
    scratch.push(home);
    await chmod(home, 0o700);
    const script = `
      import { startEmbeddedPostgres } from './dev/embedded-postgres.ts';
      const db = await startEmbeddedPostgres();
      await db.stop();
      console.log('started and stopped');`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, TMPDIR: home },
    });
    expect(out.trim().split('\n').at(-1)).toBe('started and stopped');
  }, 90_000);
});
