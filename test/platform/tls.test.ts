/**
 * The migrate function talks to the instance with two drivers: node-pg-migrate's `pg` and our
 * `postgres`. Both must verify the server's certificate and host name, the same way: with the CA
 * handed over in NODE_EXTRA_CA_CERTS (as Lambda hands over /var/runtime/ca-cert.pem) both connect,
 * without it both refuse. (With `sslmode=require`, `pg` verified and `postgres` did not.)
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EmbeddedDatabase, startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';
import { makeCertificates, type RehearsalCertificates } from '../rehearsal/tls.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
let dir: string;
let certs: RehearsalCertificates;
let server: EmbeddedDatabase;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'outbox-tls-test-'));
  certs = await makeCertificates(dir, ['localhost']);
  server = await startEmbeddedPostgres({
    tls: { cert: certs.cert, key: certs.key },
    hba: 'hostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 0.0.0.0/0 reject',
  });
});
afterAll(async () => {
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** Connects with both drivers from a fresh process (NODE_EXTRA_CA_CERTS is read at start-up). */
async function bothDrivers(
  sslmode: string,
  ca: string | undefined,
): Promise<{ pg: string; postgres: string }> {
  const url = `postgres://postgres:outbox@localhost:${server.port}/postgres?sslmode=${sslmode}`;
  const script = `
    import pg from 'pg';
    import { connect } from './shared/platform/index.ts';
    const outcome = async (fn) => { try { await fn(); return 'connected'; } catch (e) { return e.code ?? e.message; } };
    const viaPg = await outcome(async () => { const c = new pg.Client(${JSON.stringify(url)}); await c.connect(); await c.end(); });
    const viaPostgres = await outcome(async () => { const sql = connect({ url: ${JSON.stringify(url)}, max: 1, env: {} }); try { await sql\`select 1\`; } finally { await sql.end({ timeout: 1 }); } });
    console.log(JSON.stringify({ pg: viaPg, postgres: viaPostgres }));`;
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH };
  if (ca) env.NODE_EXTRA_CA_CERTS = ca;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
    cwd: root,
    env,
  });
  return JSON.parse(stdout.trim().split('\n').at(-1) as string);
}

describe('TLS to the database, as the migrate function connects', () => {
  it('verifies the certificate in both drivers with sslmode=verify-full: both connect with the CA, both refuse without it', async () => {
    expect(await bothDrivers('verify-full', certs.ca)).toEqual({ pg: 'connected', postgres: 'connected' });
    expect(await bothDrivers('verify-full', undefined)).toEqual({
      pg: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
      postgres: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
    });
  });
});
