/**
 * What a new user or an on-call engineer meets first, as a new user's review found it: `outbox
 * bus`'s port checks (a usage error naming the option or LOCAL_BUS_PORT, a port in use named with
 * the way out), the privilege error naming the user that ran the command and where each task's
 * user is documented, and the connection hint with IAM logins (the deployed database's path, not
 * a local Postgres).
 */
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../support/cli.ts';
import { createTestDatabase, type TestDatabase } from '../../support/db.ts';

const baseEnv = { HOME: process.env.HOME, AWS_EC2_METADATA_DISABLED: 'true' };
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ max: 1 });
  await db.sql.unsafe(`drop role if exists outbox_onboarding_reader`);
  // A password: the embedded Postgres asks for one (scram), the machine's may trust.
  await db.sql.unsafe(`create role outbox_onboarding_reader login password 'reader-pw-7x9q'`);
});
afterAll(async () => {
  await db.sql.unsafe(`drop role if exists outbox_onboarding_reader`);
  await db.drop();
});

describe('outbox bus: its port', () => {
  it('--port over 65535 is a usage error naming the option', async () => {
    const r = await runCli(['bus', '--port', '70000'], { env: baseEnv });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /option '--port <n>' argument '70000' is invalid\. It must be a port, 0 \(any free one\) to 65535\./,
    );
  });

  it('a malformed LOCAL_BUS_PORT is a usage error naming the variable', async () => {
    const r = await runCli(['bus'], { env: { ...baseEnv, LOCAL_BUS_PORT: 'abc' } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /^error: LOCAL_BUS_PORT: It must be a whole number, 0 or more\. \(got "abc"\)$/m,
    );
  });

  it('a port in use names it and the way out', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as { port: number };
    try {
      const r = await runCli(['bus', '--port', String(port)], { env: baseEnv });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        `port ${port} is in use (another outbox bus?): pick another with --port, or --port 0`,
      );
    } finally {
      taken.close();
    }
  });
});

describe('errors an on-call engineer meets', () => {
  it('a missing privilege names the user that ran the command and the table of users per task', async () => {
    const url = new URL(db.url);
    url.username = 'outbox_onboarding_reader';
    url.password = 'reader-pw-7x9q';
    const r = await runCli(['dead-letters', 'show', '5'], {
      env: { ...baseEnv, DATABASE_URL: url.toString() },
    });
    expect(r.code).toBe(1);
    // Without USAGE on schema outbox (migration 024) its tables are not found (42P01), as in a
    // database never migrated: the message names both causes, and the user.
    expect(r.stderr).toMatch(
      /\((42501\): the database user outbox_onboarding_reader \(from DATABASE_URL\) lacks a privilege|.*42P01\): run `outbox migrate` first.* the database user outbox_onboarding_reader \(from DATABASE_URL\) may not use schema outbox)/,
    );
    expect(r.stderr).toContain('"the user for each task"');
    expect(r.stderr).not.toMatch(/user of DATABASE_URL/);
  });

  it('with IAM logins, a database that does not answer gets the deployed path as its hint, not a local Postgres', async () => {
    const r = await runCli(['status'], {
      env: {
        ...baseEnv,
        OUTBOX_DB_IAM_AUTH: 'true',
        PGHOST: '127.0.0.1',
        PGPORT: '9',
        PGUSER: 'outbox_monitor',
        PGDATABASE: 'orders',
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'local',
        AWS_SECRET_ACCESS_KEY: 'local',
        OUTBOX_DB_CONNECT_TIMEOUT_SECONDS: '2',
      },
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'With OUTBOX_DB_IAM_AUTH=true the CLI logs in to PGHOST:PGPORT as PGUSER with an IAM token',
    );
    expect(r.stderr).not.toContain('npm run db');
  });
});
