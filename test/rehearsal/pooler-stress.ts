/**
 * Issue 11, item 10, as a check: behind a transaction pooler, a pool of ONE connection runs a slow
 * query, a catalog read, an enqueue and a failing query at the same time, again and again. Each
 * must get its own answer (the error to the failing query only), and none may hang. Run as the
 * producer role through the proxy stand-in, with the library's own connection settings.
 * Prints one JSON document: { rounds, hangs, misrouted, errors }.
 */
import { connect } from '../../shared/platform/index.ts';
import { enqueue } from '../../shared/producer/index.ts';

const ROUNDS = 11;
const report = { rounds: ROUNDS, hangs: 0, misrouted: 0, errors: [] as string[] };
for (let round = 0; round < ROUNDS; round++) {
  const sql = connect({ max: 1 });
  const work = [
    sql`select pg_sleep(0.1)`.then(() => 'slept'),
    // A read the producer role may make (it reads no outbox table: roles, migration 009).
    sql`select count(*) from pg_stat_activity`.then(() => 'status'),
    enqueue(sql, {
      type: 'PoolerChecked',
      source: 'rehearsal.pooler',
      aggregateType: 'pooler',
      aggregateId: String(round),
      payload: { round },
    }).then(() => 'enqueued'),
    sql`select 1/0`.then(() => 'divided'),
  ];
  const settled = await Promise.race([
    Promise.allSettled(work),
    new Promise<'hang'>((resolve) => setTimeout(() => resolve('hang'), 5_000).unref()),
  ]);
  if (settled === 'hang') report.hangs++;
  else {
    const expected = ['slept', 'status', 'enqueued', '22012'];
    const got = settled.map((s) =>
      s.status === 'fulfilled' ? s.value : String((s.reason as { code?: string }).code ?? s.reason),
    );
    if (got.some((g, i) => g !== expected[i])) {
      report.misrouted++;
      report.errors.push(got.join(','));
    }
  }
  await sql.end({ timeout: 1 });
}
process.stdout.write(`${JSON.stringify(report)}\n`);
