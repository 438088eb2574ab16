/**
 * `node bench/inbox-rls.ts [--events 2000] [--rounds 3]`: what the inbox tables' row-level
 * security (migration 020) costs a consumer, per event. One consumer's own role
 * (`outbox_consumer_<name>`, mapped to it alone) runs the real `inbox()` wrapper over `--events`
 * deliveries of new events, with the policies enabled and then disabled on the same tables
 * (`alter table … disable row level security`), alternating `--rounds` times so that drift of
 * the machine falls on both; each pass's events are of fresh aggregates, wait-for-gap order (the
 * most statements per event: record, chain lock, chain advance). Other consumers' rows are in the
 * tables (`--others`), so that a predicate that stopped using the index would show. Prints the
 * median wall time per event of each, and the difference. Needs a Postgres (DATABASE_URL, else an
 * embedded one) and a user that may create roles and databases. The role commits with
 * `synchronous_commit = off`: the policy costs CPU in the statements, and the flush's latency
 * would drown it.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { EventBridgeEvent } from 'aws-lambda';
import postgres from 'postgres';
import { delivery } from '../dev/delivery.ts';
import { startEmbeddedPostgres } from '../dev/embedded-postgres.ts';
import { inbox } from '../shared/consumer/index.ts';
import { connect, type OutboxRoles } from '../shared/platform/index.ts';
import { migrate } from '../shared/platform/migrate.ts';
import { consumerRoleName, ensureRoles } from '../shared/relay/operations/index.ts';

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '3' },
    others: { type: 'string', default: '100000' },
  },
});
const events = Number(args.events);
const rounds = Number(args.rounds);

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
const serverUrl = process.env.DATABASE_URL ?? (embedded?.url as string);
const suffix = randomBytes(4).toString('hex');
const database = `inbox_rls_bench_${suffix}`;
const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
await admin.unsafe(`create database ${database}`);
const url = new URL(serverUrl);
url.pathname = `/${database}`;
const roles: OutboxRoles = {
  relay: `bench_relay_${suffix}`,
  monitor: `bench_monitor_${suffix}`,
  producer: `bench_producer_${suffix}`,
  consumer: `bench_consumer_${suffix}`,
};
const role = consumerRoleName('billing', roles);
const owner = connect({ url: url.toString(), max: 1, env: {} });
try {
  await migrate(url.toString());
  await ensureRoles(owner, roles, 15_000, { consumers: ['billing'] });
  await owner.unsafe(`alter role "${role}" password 'bench'`);
  // The policy costs CPU inside the statements, not in the commit's WAL flush, whose latency on a
  // shared disk would drown it: the bench's role commits without waiting for the flush.
  await owner.unsafe(`alter role "${role}" in database ${database} set synchronous_commit = off`);
  // Other consumers' records and order state: what a mapped role's statements must not scan.
  await owner`
    insert into outbox.inbox_message (consumer, message_key, event_id, outcome)
    select 'other-' || (i % 20), gen_random_uuid()::text, gen_random_uuid()::text, 'processed'
    from generate_series(1, ${Number(args.others)}) i`;
  await owner`analyze inbox_message`;
  const roleUrl = new URL(url.toString());
  roleUrl.username = role;
  roleUrl.password = 'bench';
  const sql = connect({ url: roleUrl.toString(), max: 1, env: {} });
  const handler = inbox(
    { sql, consumer: 'billing', order: 'wait-for-gap', metrics: false },
    async () => 'applied',
  );
  const context = { getRemainingTimeInMillis: () => 30_000 } as never;
  const deliveryOf = (sequence: number, aggregateId: string) =>
    delivery({ metadata: { aggregateId, sequence } }) as EventBridgeEvent<string, unknown>;
  // The pool's one backend: its CPU time (/proc, when the server runs on this machine) is what
  // the policy adds to, and it is far less disturbed by other load than the wall time.
  const [{ pid } = { pid: 0 }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  const ticksPerSecond = 100; // USER_HZ on Linux
  const backendCpuMs = (): number | undefined => {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond; // utime + stime
    } catch {
      return undefined;
    }
  };
  /** µs per event of one pass (wall, and the backend's CPU): events/2 aggregates, two events each. */
  const pass = async (): Promise<{ wall: number; cpu: number | undefined }> => {
    const aggregate = randomUUID();
    const cpuBefore = backendCpuMs();
    const started = performance.now();
    for (let i = 0; i < events; i++) {
      await handler(deliveryOf((i % 2) + 1, `${aggregate}-${Math.floor(i / 2)}`), context);
    }
    const wall = ((performance.now() - started) * 1000) / events;
    const cpuAfter = backendCpuMs();
    const cpu =
      cpuBefore === undefined || cpuAfter === undefined
        ? undefined
        : ((cpuAfter - cpuBefore) * 1000) / events;
    return { wall, cpu };
  };
  const setPolicy = async (on: boolean) => {
    for (const table of ['inbox_message', 'inbox_aggregate', 'inbox_gap']) {
      await owner.unsafe(`alter table ${table} ${on ? 'enable' : 'disable'} row level security`);
    }
  };
  await setPolicy(true);
  await pass(); // warm-up: connection, plans, caches
  const times = { on: [] as number[], off: [] as number[] };
  const cpu = { on: [] as number[], off: [] as number[] };
  for (let r = 0; r < rounds; r++) {
    for (const on of r % 2 === 0 ? [true, false] : [false, true]) {
      await setPolicy(on);
      const p = await pass();
      times[on ? 'on' : 'off'].push(p.wall);
      if (p.cpu !== undefined) cpu[on ? 'on' : 'off'].push(p.cpu);
    }
  }
  await setPolicy(true);
  await sql.end();
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  const on = median(times.on);
  const off = median(times.off);
  console.log(
    `inbox, wait-for-gap, ${events} events per pass, ${rounds} passes each, median wall time per event:`,
  );
  console.log(
    `  with the policy:    ${on.toFixed(0)} µs  (passes: ${times.on.map((t) => t.toFixed(0)).join(', ')})`,
  );
  console.log(
    `  without the policy: ${off.toFixed(0)} µs  (passes: ${times.off.map((t) => t.toFixed(0)).join(', ')})`,
  );
  console.log(
    `  difference:         ${(on - off).toFixed(0)} µs per event (${(((on - off) / off) * 100).toFixed(1)} %)`,
  );
  // The two passes of a round ran back to back: their difference is the least disturbed by drift.
  const paired = (xs: { on: number[]; off: number[] }) =>
    median(xs.on.map((t, i) => t - (xs.off[i] as number)));
  console.log(`  median of the rounds' differences: ${paired(times).toFixed(0)} µs per event`);
  if (cpu.on.length > 0) {
    const [cOn, cOff] = [median(cpu.on), median(cpu.off)];
    console.log(`median CPU time of the database backend per event:`);
    console.log(
      `  with the policy:    ${cOn.toFixed(0)} µs  (passes: ${cpu.on.map((t) => t.toFixed(0)).join(', ')})`,
    );
    console.log(
      `  without the policy: ${cOff.toFixed(0)} µs  (passes: ${cpu.off.map((t) => t.toFixed(0)).join(', ')})`,
    );
    console.log(
      `  difference:         ${(cOn - cOff).toFixed(0)} µs per event (${(((cOn - cOff) / cOff) * 100).toFixed(1)} %)`,
    );
    console.log(`  median of the rounds' differences: ${paired(cpu).toFixed(0)} µs per event`);
  }
} finally {
  await owner.end({ timeout: 5 });
  await admin.unsafe(`drop database if exists ${database} with (force)`);
  for (const r of [...Object.values(roles), role]) {
    await admin.unsafe(`drop role if exists "${r}"`).catch(() => {});
  }
  await admin.end();
  await embedded?.stop();
}
