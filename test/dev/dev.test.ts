/**
 * The local tools as a user runs them: `npm start` and `npm run bus` through npm, stopped with
 * Ctrl-C the way a terminal sends it (SIGINT to the whole foreground process group).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { collect, runCli, waitForOutput } from '../support/cli.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const repo = fileURLToPath(new URL('../..', import.meta.url));

/** Runs `npm run <script>` in a process group of its own, as a terminal's foreground job. */
function npmRun(script: string, env: NodeJS.ProcessEnv, args: string[] = []): ChildProcess {
  return spawn('npm', ['run', '--silent', script, ...(args.length > 0 ? ['--', ...args] : [])], {
    cwd: repo,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
}

/** What a terminal does on Ctrl-C: SIGINT to every process of the foreground group. */
const ctrlC = (child: ChildProcess) => process.kill(-(child.pid as number), 'SIGINT');

const running: ChildProcess[] = [];
afterEach(() => {
  for (const child of running.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) process.kill(-(child.pid as number), 'SIGKILL');
  }
});

describe('npm start', () => {
  let scratch: string;
  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'outbox-dev-test-'));
    // A temp directory like /tmp: as root the embedded server runs as the postgres user, which
    // reads its password file from there.
    await chmod(scratch, 0o1777);
  });
  afterAll(async () => {
    await rm(scratch, { recursive: true, force: true });
  });

  it('stops on Ctrl-C with exit 0 and leaves nothing in the temp directory (embedded Postgres)', async () => {
    const child = npmRun('start', { TMPDIR: scratch, LOCAL_BUS_PORT: '0' });
    running.push(child);
    const run = collect(child);
    // Past the first status line (every 3 s): a user watches it for minutes, not for one event.
    await waitForOutput(
      () => run.output().stdout + run.output().stderr,
      /^(?=[\s\S]*billing: invoiced order)(?=[\s\S]*status: pending \d+)/,
      60_000,
    );
    expect((await readdir(scratch)).some((n) => n.startsWith('outbox-pg-'))).toBe(true);
    ctrlC(child);
    const r = await run;
    expect(r.stdout).toMatch(/relay stopped: published \d+/);
    // Lines for a reader: no metric lines (EMF, for CloudWatch) among them.
    expect(r.stdout.split('\n').filter((line) => line.startsWith('{'))).toEqual([]);
    expect({ code: r.code, signal: r.signal }).toEqual({ code: 0, signal: null });
    // Node's own compile cache may appear there; nothing of ours may.
    expect((await readdir(scratch)).filter((n) => n !== 'node-compile-cache')).toEqual([]);
  }, 120_000);

  it('refuses a DATABASE_URL that is not a URL, or one it cannot reach, with the reason and what to do', async () => {
    const malformed = await collect(npmRun('start', { DATABASE_URL: 'localhost:5432', LOCAL_BUS_PORT: '0' }));
    expect(malformed.stderr).toMatch(/^error: DATABASE_URL: must be a postgres:\/\/ or postgresql:\/\/ URL/m);
    expect(malformed.code).toBe(2);
    const refused = await collect(
      npmRun('start', { DATABASE_URL: 'postgres://app@127.0.0.1:9/shop', LOCAL_BUS_PORT: '0' }),
    );
    expect(refused.stderr).toMatch(/^error: cannot connect to Postgres at 127\.0\.0\.1:9 .*ECONNREFUSED/m);
    expect(refused.stderr).toMatch(/npm run db/);
    expect(refused.code).toBe(1);
  }, 60_000);

  describe('against your own database', () => {
    let db: TestDatabase;
    beforeAll(async () => {
      db = await createTestDatabase({ max: 2 });
    });
    afterAll(async () => {
      await db?.drop();
    });

    it('runs any number of times: the billing demo invoices new orders on every run', async () => {
      for (let runNumber = 1; runNumber <= 3; runNumber++) {
        const child = npmRun('start', { DATABASE_URL: db.url, LOCAL_BUS_PORT: '0' });
        running.push(child);
        const run = collect(child);
        await waitForOutput(
          () => run.output().stdout,
          /^(?=[\s\S]*billing: ignored a duplicate delivery)(?=(?:[\s\S]*billing: invoiced order){2})/,
          60_000,
        );
        ctrlC(child);
        const r = await run;
        expect(r.stdout, `run ${runNumber}`).not.toMatch(/billing: failed/);
        expect({ code: r.code, signal: r.signal }, `run ${runNumber}: ${r.stdout}\n${r.stderr}`).toEqual({
          code: 0,
          signal: null,
        });
      }
      const [invoices] =
        await db.sql`select count(*)::int as n, count(distinct order_id)::int as orders from billing_invoice`;
      expect(invoices?.n).toBeGreaterThanOrEqual(6);
      expect(invoices?.orders).toBe(invoices?.n);
    }, 180_000);
  });
});

describe('npm test', () => {
  it('leaves nothing of the embedded Postgres in the temp directory, even when tests fail', async () => {
    const scratch = await mkdtemp(join(tmpdir(), 'outbox-test-run-'));
    try {
      await chmod(scratch, 0o1777);
      // The canary run: the real global setup (embedded Postgres, as DATABASE_URL is unset) and
      // three tests that fail on purpose.
      const child = npmRun('test', { TMPDIR: scratch, OUTBOX_TEST_CANARY: '1' });
      running.push(child);
      const r = await collect(child);
      expect(r.code, r.stdout + r.stderr).toBe(1);
      expect(r.stdout).toMatch(/3 failed/);
      expect((await readdir(scratch)).filter((n) => n !== 'node-compile-cache')).toEqual([]);
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('npm run bus', () => {
  it('stops on Ctrl-C with exit 0', async () => {
    const child = npmRun('bus', { LOCAL_BUS_PORT: '0' });
    running.push(child);
    const run = collect(child);
    await waitForOutput(
      () => run.output().stdout,
      /local EventBridge endpoint listening on http:\/\/127\.0\.0\.1:\d+/,
    );
    ctrlC(child);
    const r = await run;
    expect({ code: r.code, signal: r.signal }).toEqual({ code: 0, signal: null });
  }, 60_000);

  it('prints an export line that is all the CLI relay needs beside DATABASE_URL', async () => {
    const db = await createTestDatabase({ max: 1 });
    try {
      const child = npmRun('bus', { LOCAL_BUS_PORT: '0' });
      running.push(child);
      const run = collect(child);
      await waitForOutput(() => run.output().stdout, /^\s*export .*$/m);
      const line = /^\s*export (.*)$/m.exec(run.output().stdout)?.[1] ?? '';
      // What `export A=1 B=2` sets in a shell: the line has no quoting, so split on spaces.
      const exported = Object.fromEntries(
        line
          .split(/\s+/)
          .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
      );
      await db.sql`select * from outbox_enqueue(event_type => 'BusTried', source => 'dev.test',
        aggregate_type => 'try', aggregate_id => '1', payload => '{}'::jsonb)`;
      const relayed = await runCli(['relay', '--until-empty'], {
        env: { HOME: process.env.HOME, AWS_EC2_METADATA_DISABLED: 'true', DATABASE_URL: db.url, ...exported },
      });
      expect(relayed.stderr).toBe('');
      expect(relayed.code).toBe(0);
      await waitForOutput(() => run.output().stdout, /BusTried/);
      ctrlC(child);
      await run;
    } finally {
      await db.drop();
    }
  }, 60_000);

  it('--refuse <text> refuses the events whose detail holds the text, so a dead letter can be tried locally', async () => {
    const db = await createTestDatabase({ max: 1 });
    try {
      const child = npmRun('bus', { LOCAL_BUS_PORT: '0' }, ['--refuse', 'poison']);
      running.push(child);
      const run = collect(child);
      await waitForOutput(() => run.output().stdout, /refusing .*poison/);
      const url = /listening on (http:\/\/\S+)/.exec(run.output().stdout)?.[1] ?? '';
      for (const [id, note] of [
        ['1', 'poison'],
        ['2', 'fine'],
      ] as const) {
        await db.sql`select * from outbox_enqueue(event_type => 'BusRefusal', source => 'dev.test',
          aggregate_type => 'try', aggregate_id => ${id}, payload => ${db.sql.json({ note })})`;
      }
      const env = {
        HOME: process.env.HOME,
        AWS_EC2_METADATA_DISABLED: 'true',
        DATABASE_URL: db.url,
        EVENT_BUS_NAME: 'demo',
        AWS_ENDPOINT_URL_EVENTBRIDGE: url,
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'local',
        AWS_SECRET_ACCESS_KEY: 'local',
      };
      await runCli(['relay', '--until-empty'], { env });
      const rows = await db.sql<
        { aggregate_id: string; published: boolean; dead: boolean; last_error: string | null }[]
      >`
        select aggregate_id, published_at is not null as published, dead_lettered_at is not null as dead, last_error
        from outbox order by aggregate_id`;
      expect(rows.map((r) => [r.aggregate_id, r.published, r.dead])).toEqual([
        ['1', false, true],
        ['2', true, false],
      ]);
      expect(rows[0]?.last_error).toMatch(/InvalidArgument/);
      const listed = await runCli(['dead-letters', 'list', '--json'], { env });
      expect(JSON.parse(listed.stdout).map((d: { aggregateId: string }) => d.aggregateId)).toEqual(['1']);
      ctrlC(child);
      expect((await run).code).toBe(0);
    } finally {
      await db.drop();
    }
  }, 60_000);

  it('--help prints its options and exits 0 without starting', async () => {
    const child = npmRun('bus', { LOCAL_BUS_PORT: '0' }, ['--help']);
    running.push(child);
    const r = await collect(child);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/--refuse <text>/);
    expect(r.stdout).not.toMatch(/listening/);
  }, 60_000);

  it('refuses an unknown option, naming it', async () => {
    const child = npmRun('bus', { LOCAL_BUS_PORT: '0' }, ['--refuse-all']);
    running.push(child);
    const r = await collect(child);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--refuse-all/);
  }, 60_000);
});
