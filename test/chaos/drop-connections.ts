/**
 * Drops this process's database connections while it runs transactions and plain queries, and
 * reports whether it survived: `node test/chaos/drop-connections.ts <database url> <seconds>`.
 *
 * porsager `postgres` 3.4.9 (porsager/postgres#1154, #1208) can throw an uncaught TypeError from a
 * write it scheduled for a transaction whose connection had just closed (its automatic ROLLBACK is
 * sent on the dead connection), which ends the process. The workers use a ConnectionPool and
 * replace it after a connection failure, as the relay does (the driver can leave a dead connection's
 * slot unable to send). Prints one JSON line and exits 0 when the process lived through the run and
 * the server still answers a new connection.
 *
 * It runs for `<seconds>`, and then on (up to 40 s in all) until it has seen at least 100 statements
 * complete and 10 connections terminated: on a loaded machine 8 s may hold too few of either for
 * the run to show anything (a CI run at load 10 on 2 cores completed 56).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  connect,
  ignoreTransientDriverRejections,
  isConnectionFailure,
  openPool,
} from '../../shared/platform/index.ts';

const [url, seconds = '8'] = process.argv.slice(2);
const MIN_COMPLETED = 100;
const MIN_TERMINATED = 10;
if (!url) throw new Error('usage: drop-connections.ts <database url> [seconds]');
const warnings: string[] = [];
ignoreTransientDriverRejections((message) => warnings.push(message));

const app = `drop-${process.pid}`;
const pool = openPool({ url, max: 4, env: {}, applicationName: app });
const admin = connect({ url, max: 1, env: {} });
const until = Date.now() + Number(seconds) * 1000;
const hardUntil = Date.now() + 40_000;
const failures = new Map<string, number>();
let completed = 0;
let terminated = 0;
const running = () =>
  Date.now() < until ||
  (Date.now() < hardUntil && (completed < MIN_COMPLETED || terminated < MIN_TERMINATED));

const worker = async (i: number) => {
  while (running()) {
    const generation = pool.generation;
    const sql = pool.sql;
    try {
      if (i % 3 === 0) {
        await sql.begin(async (tx) => {
          await tx`select 1`;
          await tx`select pg_sleep(0.002)`;
        });
      } else if (i % 3 === 1) {
        await sql`select ${'x'.repeat(2_000)}::text as big`;
      } else {
        await sql`select 1`;
      }
      completed++;
    } catch (error) {
      const code = (error as { code?: string }).code ?? String(error);
      failures.set(code, (failures.get(code) ?? 0) + 1);
      if (isConnectionFailure(error)) pool.replace(generation);
    }
  }
};
const killer = async () => {
  while (running()) {
    const [row] = await admin<{ n: number }[]>`
      select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name = ${app}`;
    terminated += row?.n ?? 0;
    // Let the workers reconnect and get some statements through before the next round (a few, or
    // 250 ms at most): killing at once again, on a slow machine, ended nearly every statement
    // before it could complete (a CI run completed 54 in 40 s, and 1,610 connections were
    // terminated in a run that completed 99). Every round still lands in the middle of the
    // workers' transactions and queries.
    const before = completed;
    for (const waitUntil = Date.now() + 250; completed < before + 5 && Date.now() < waitUntil; ) {
      await sleep(5);
    }
    await sleep(Math.random() * 30);
  }
};
await Promise.all([...Array.from({ length: 12 }, (_, i) => worker(i)), killer()]);

const fresh = connect({ url, max: 1, env: {} });
const [answer] = await fresh<{ one: number }[]>`select 1 as one`;
process.stdout.write(
  `${JSON.stringify({ survived: true, answered: answer?.one === 1, completed, terminated, failures: Object.fromEntries(failures), warnings: warnings.length })}\n`,
);
await Promise.all([pool.end(1), admin.end({ timeout: 1 }), fresh.end({ timeout: 1 })]);
process.exit(0);
