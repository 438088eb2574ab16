/**
 * Errors that say what to do: usage errors (exit 2), configuration ranges and units, a malformed or
 * unreachable DATABASE_URL, a database that was never migrated. Each runs the real CLI.
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  connect,
  loadMonitorSettings,
  loadRelaySettings,
  monitorConfigSchema,
  OutboxConfigError,
  relayConfigSchema,
} from '../../../shared/platform/index.ts';
import { cliEnv, runCli } from '../../support/cli.ts';
import { withDatabase } from '../../support/db.ts';
import { useHarness } from '../../support/harness.ts';

const h = useHarness({ max: 4 });

/** The configuration contract's environment, pointing at the test database and local bus. */
const env = (extra: Record<string, string | undefined> = {}) => cliEnv(h, extra);

const event = JSON.stringify({ type: 'T', source: 's', aggregateType: 'x', aggregateId: '1', payload: {} });

/** Every command that reads or writes the outbox, with what it needs to get that far. */
const DATABASE_COMMANDS: { args: string[]; stdin?: string }[] = [
  { args: ['migrate'] },
  { args: ['status'] },
  { args: ['enqueue'], stdin: event },
  { args: ['relay', '--once'] },
  { args: ['relay', '--until-empty'] },
  { args: ['dead-letters', 'list'] },
  { args: ['prune', '--dry-run'] },
];

describe('usage errors', () => {
  it.each([
    [['dead-letters', 'replay'], /say which dead letters to replay: their ids .*or --all/],
    [['dead-letters', 'discard'], /say which dead letters to discard: their ids .*or --all/],
    [['dead-letters', 'replay', '1', '--all'], /give dead-letter ids or --all, not both/],
    [['dead-letters', 'replay', '1', '--type', 'T'], /--type, --aggregate and --since select rows for --all/],
    [['dead-letters', 'replay', 'abc'], /value 'abc' is invalid for argument 'ids'. It must be a row id/],
    [['dead-letters', 'show', 'abc'], /value 'abc' is invalid for argument 'id'. It must be a row id/],
    [['dead-letters', 'show'], /missing required argument 'id'/],
    [['dead-letters', 'list', '--since', 'yesterday'], /'--since <when>' argument 'yesterday' is invalid/],
    [['dead-letters', 'list', '--limit', '0'], /'--limit <n>' argument '0' is invalid.*whole number/],
    [['dead-letters', 'list', '--limit', 'ten'], /'--limit <n>' argument 'ten' is invalid/],
    [['enqueue', '--batch-size', '0'], /'--batch-size <n>' argument '0' is invalid/],
    [['relay', '--once', '--until-empty'], /'--once' cannot be used with option '--until-empty'/],
    [['relay', 'now'], /too many arguments/],
    [['status', '--verbose'], /unknown option '--verbose'/],
    [['frobnicate'], /unknown command 'frobnicate'/],
    [[], /Usage: outbox/],
    [['dead-letters'], /Usage: outbox dead-letters/],
    [['bus', '--stack', 'Shop'], /--stack and --retry-delay-scale apply only with --deliver/],
    [
      ['bus', '--deliver', '--retry-delay-scale', '2'],
      /'--retry-delay-scale <factor>' argument '2' is invalid/,
    ],
    [
      ['bus', '--port', '0', '--deliver', '/nonexistent'],
      /--deliver: \/nonexistent holds no cloud assembly \(manifest\.json\): run `npx cdk synth` first/,
    ],
  ])('outbox %j exits 2 and says why', async (args, message) => {
    const r = await runCli(args, { env: env() });
    expect(r.stderr).toMatch(message);
    expect(r.code).toBe(2);
  });

  it('--help and --version are not errors', async () => {
    const r = await runCli(['relay', '--help'], { env: env() });
    expect(r.stdout).toContain('Usage: outbox relay');
    expect(r.code).toBe(0);
    const v = await runCli(['--version'], { env: env() });
    expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    expect(v.code).toBe(0);
  });
});

describe('configuration errors name the variable, its range and unit', () => {
  it.each([
    [
      'OUTBOX_BATCH_SIZE',
      'abc',
      /^error: OUTBOX_BATCH_SIZE: must be a whole number from 1 to 10000 \(.+\) \(got "abc"\)/m,
    ],
    [
      'OUTBOX_LEASE_SECONDS',
      '2',
      /^error: OUTBOX_LEASE_SECONDS: must be a whole number from 5 to 3600 \(seconds\) \(got "2"\)/m,
    ],
    [
      'OUTBOX_POLL_INTERVAL_MS',
      '1.5',
      /^error: OUTBOX_POLL_INTERVAL_MS: must be a whole number from 10 to 60000 \(ms\) \(got "1.5"\)/m,
    ],
    [
      'OUTBOX_DB_POOL_SIZE',
      'many',
      /^error: OUTBOX_DB_POOL_SIZE: must be a whole number from 1 to 100 \(.+\) \(got "many"\)/m,
    ],
  ])('%s=%s is refused with exit 2', async (variable, value, message) => {
    const r = await runCli(['relay', '--once'], { env: env({ [variable]: value }) });
    expect(r.stderr).toMatch(message);
    expect(r.code).toBe(2);
  });

  it('prune names the range and unit of a retention', async () => {
    const r = await runCli(['prune', '--dry-run'], { env: env({ OUTBOX_INBOX_RETENTION_DAYS: '1' }) });
    expect(r.stderr).toMatch(
      /^error: OUTBOX_INBOX_RETENTION_DAYS: must be a number from 2 to 3650 \(days\) \(got "1"\)/m,
    );
    expect(r.code).toBe(2);
  });
});

describe('every number and enum setting', () => {
  const settings = [
    ...Object.keys(relayConfigSchema.shape).map((v) => [v, loadRelaySettings] as const),
    ...Object.keys(monitorConfigSchema.shape).map((v) => [v, loadMonitorSettings] as const),
    ...['OUTBOX_DB_POOL_SIZE', 'OUTBOX_DB_CONNECT_TIMEOUT_SECONDS', 'OUTBOX_DB_STATEMENT_TIMEOUT_MS'].map(
      (v) => [v, (env: NodeJS.ProcessEnv) => connect({ env })] as const,
    ),
  ].filter(([v]) => !['EVENT_BUS_NAME', 'OUTBOX_METRIC_NAMESPACE', 'OUTBOX_RELAY_FUNCTION_NAME'].includes(v));

  it.each(settings)('%s names what it accepts: the range and unit, or the choices', (variable, load) => {
    let caught: unknown;
    try {
      load({ EVENT_BUS_NAME: 'bus', [variable]: 'abc' });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(OutboxConfigError);
    expect((caught as Error).message).toMatch(
      new RegExp(
        `^${variable}: must be (a whole number|a number) from [\\d.]+ to [\\d.]+ \\([^)]+\\) \\(got "abc"\\); unset it to use the default, \\S+$` +
          `|^${variable}: must be one of \\w+(, \\w+)+ \\(got "abc"\\); unset it to use the default, \\w+$`,
      ),
    );
  });
});

describe('DATABASE_URL', () => {
  it.each(DATABASE_COMMANDS)('a value that is not a URL is refused with the reason: $args', async (c) => {
    const r = await runCli(c.args, { env: env({ DATABASE_URL: 'localhost:5432' }), stdin: c.stdin });
    expect(r.stderr).toMatch(
      /^error: DATABASE_URL: must be a postgres:\/\/ or postgresql:\/\/ URL, like postgres:\/\/user:password@localhost:5432\/database \(got "localhost:5432"\)/m,
    );
    expect(r.code).toBe(2);
  });

  it('a malformed URL is refused without echoing its password', async () => {
    const r = await runCli(['status'], { env: env({ DATABASE_URL: 'postgres://app:s3cret@db:port/shop' }) });
    expect(r.stderr).toMatch(/^error: DATABASE_URL: .*invalid/m);
    expect(r.stderr).toContain('postgres://app:***@db:port/shop');
    expect(r.stderr).not.toContain('s3cret');
    expect(r.code).toBe(2);
  });

  it.each(DATABASE_COMMANDS)(
    'a refused connection names DATABASE_URL and says how to get a local Postgres: $args',
    async (c) => {
      const r = await runCli(c.args, {
        env: env({
          DATABASE_URL: 'postgres://app:s3cret@127.0.0.1:9/shop',
          OUTBOX_DB_CONNECT_TIMEOUT_SECONDS: '1',
        }),
        stdin: c.stdin,
      });
      expect(r.stderr).toMatch(
        /^error: cannot connect to Postgres at 127\.0\.0\.1:9 \(database "shop", user "app"\): .*ECONNREFUSED/m,
      );
      expect(r.stderr).toMatch(/DATABASE_URL/);
      expect(r.stderr).toMatch(/npm run db/);
      expect(r.stderr).not.toContain('s3cret');
      expect(r.code).toBe(1);
    },
    30_000,
  );

  it('without DATABASE_URL, the failure says it is unset and which defaults were used', async () => {
    const r = await runCli(['status'], {
      env: env({ DATABASE_URL: undefined, PGHOST: '127.0.0.1', PGPORT: '9', PGUSER: 'me' }),
    });
    expect(r.stderr).toMatch(
      /^error: cannot connect to Postgres at 127\.0\.0\.1:9 \(database "me", user "me"\)/m,
    );
    expect(r.stderr).toMatch(/DATABASE_URL is not set/);
    expect(r.stderr).toMatch(/npm run db/);
    expect(r.code).toBe(1);
  });

  it('with IAM logins (the runbook unsets DATABASE_URL), the failure names the PG variables and never says to set DATABASE_URL', async () => {
    const r = await runCli(['status'], {
      env: env({
        DATABASE_URL: undefined,
        OUTBOX_DB_IAM_AUTH: 'true',
        PGHOST: '127.0.0.1',
        PGPORT: '9',
        PGUSER: 'outbox_monitor',
        PGDATABASE: 'orders',
      }),
    });
    expect(r.stderr).toMatch(
      /^error: cannot connect to Postgres at 127\.0\.0\.1:9 \(database "orders", user "outbox_monitor"\)/m,
    );
    expect(r.stderr).not.toMatch(/set DATABASE_URL|DATABASE_URL it prints/);
    expect(r.stderr).toMatch(/OUTBOX_DB_IAM_AUTH=true: an IAM token for PGUSER at PGHOST:PGPORT/);
    expect(r.stderr).toMatch(/keep DATABASE_URL unset/);
    expect(r.code).toBe(1);
  });

  it('with IAM logins and DATABASE_URL set, the failure says to unset it, as the runbook does', async () => {
    const r = await runCli(['status'], {
      env: env({
        DATABASE_URL: 'postgres://app@127.0.0.1:9/shop',
        OUTBOX_DB_IAM_AUTH: 'true',
        PGHOST: '127.0.0.1',
        PGPORT: '9',
        PGUSER: 'outbox_monitor',
      }),
    });
    expect(r.stderr).toMatch(/^error: cannot connect to Postgres/m);
    expect(r.stderr).toMatch(/unset DATABASE_URL/);
    expect(r.stderr).not.toMatch(/fix it to point at your Postgres|npm run db/);
    expect(r.code).toBe(1);
  });

  it('an unknown host, database or user is a connection failure with the same advice', async () => {
    const noDatabase = withDatabase(h.db.url, 'no_such_database');
    const noUser = new URL(h.db.url);
    noUser.username = 'no_such_user';
    for (const url of ['postgres://app@db.invalid:5432/shop', noDatabase, noUser.toString()]) {
      const r = await runCli(['status'], {
        env: env({ DATABASE_URL: url, OUTBOX_DB_CONNECT_TIMEOUT_SECONDS: '2' }),
      });
      expect(r.stderr, url).toMatch(/^error: cannot connect to Postgres at /m);
      expect(r.stderr, url).toMatch(/npm run db/);
      expect(r.code, url).toBe(1);
    }
  });
});

describe('a database that was never migrated', () => {
  const name = `outbox_unmigrated_${randomBytes(4).toString('hex')}`;
  let url = '';
  beforeAll(async () => {
    const admin = postgres(inject('databaseUrl'), { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${name}`);
    await admin.end();
    url = withDatabase(inject('databaseUrl'), name);
  });
  afterAll(async () => {
    const admin = postgres(inject('databaseUrl'), { max: 1, onnotice: () => {} });
    await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  });

  it.each(DATABASE_COMMANDS.filter((c) => c.args[0] !== 'migrate'))(
    'says to run `outbox migrate`: $args',
    async (c) => {
      const r = await runCli(c.args, { env: env({ DATABASE_URL: url }), stdin: c.stdin });
      expect(r.stderr).toMatch(/run `outbox migrate`/);
      expect(r.stderr).toMatch(new RegExp(`database "${name}"`));
      expect(r.code).toBe(1);
    },
  );
});

describe('enqueue', () => {
  it('prints progress that agrees with its summary when lines are duplicates (and none for one transaction)', async () => {
    const line = (id: string, key?: string) =>
      JSON.stringify({
        type: 'T',
        source: 's',
        aggregateType: 'x',
        aggregateId: id,
        payload: {},
        idempotencyKey: key,
      });
    const input = [line('1', 'k1'), line('2', 'k2'), line('3'), line('1', 'k1')].join('\n');
    const r = await runCli(['enqueue', '--batch-size', '2'], { env: env(), stdin: input });
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe('enqueued 3 event(s), 1 duplicate(s) skipped');
    expect(r.stderr.trim().split('\n').at(-1)).toBe(
      'enqueue: 4 of 4 events done: 3 enqueued, 1 duplicate(s) skipped',
    );
    const small = await runCli(['enqueue'], { env: env(), stdin: input });
    expect(small.stdout.trim()).toBe('enqueued 1 event(s), 3 duplicate(s) skipped');
    expect(small.stderr).toBe('');
  });
});

describe('a privilege the database user lacks', () => {
  it('migrate --roles as a user that may not create roles says which user it needs', async () => {
    const role = `no_createrole_${randomBytes(4).toString('hex')}`;
    const admin = postgres(inject('databaseUrl'), { max: 1, onnotice: () => {} });
    await admin.unsafe(`create role "${role}" login password 'x'`);
    await admin.unsafe(`create database "${role}" owner "${role}"`);
    try {
      const url = new URL(withDatabase(inject('databaseUrl'), role));
      url.username = role;
      url.password = 'x';
      const r = await runCli(['migrate', '--roles'], { env: env({ DATABASE_URL: url.toString() }) });
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/\(42501\).*needs a user that may create roles/);
    } finally {
      await admin.unsafe(`drop database if exists "${role}" with (force)`);
      await admin.unsafe(`drop role if exists "${role}"`);
      await admin.end();
    }
  });
});

describe('a database that was never migrated, reached without DATABASE_URL', () => {
  const name = `outbox_unmigrated_pg_${randomBytes(4).toString('hex')}`;
  beforeAll(async () => {
    const admin = postgres(inject('databaseUrl'), { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${name}`);
    await admin.end();
  });
  afterAll(async () => {
    const admin = postgres(inject('databaseUrl'), { max: 1, onnotice: () => {} });
    await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  });

  it('says to run `outbox migrate` with the same PG variables, not "the same DATABASE_URL"', async () => {
    const server = new URL(inject('databaseUrl'));
    const r = await runCli(['status'], {
      env: env({
        DATABASE_URL: undefined,
        PGHOST: server.hostname,
        PGPORT: server.port || '5432',
        PGUSER: decodeURIComponent(server.username),
        PGPASSWORD: decodeURIComponent(server.password) || undefined,
        PGDATABASE: name,
      }),
    });
    expect(r.stderr).toMatch(new RegExp(`the outbox tables are missing from database "${name}"`));
    expect(r.stderr).toMatch(/run `outbox migrate` first/);
    expect(r.stderr).not.toMatch(/same DATABASE_URL/);
    expect(r.stderr).toMatch(/DATABASE_URL is not set, so libpq's PGHOST, PGPORT, PGUSER and PGDATABASE/);
    expect(r.code).toBe(1);
  });
});
