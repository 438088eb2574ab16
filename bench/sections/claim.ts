import postgres from 'postgres';
import { claimBatch } from '../../shared/relay/sql/index.ts';
import type { Bench } from '../support/bench.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runClaim(bench: Bench): Promise<void> {
  const { params, results, sql, bus, dbUrl, reset, seed, pct, report, log, want, runRelayProcess } = bench;
  // 6. Claim latency: empty history vs a large published history, and under a held-open transaction.
  if (want('claim')) {
    await bus.setFaults({});
    const measureClaims = async (label: string) => {
      const samples: number[] = [];
      const claimedCold: number[] = [];
      for (let i = 0; i < 60; i++) {
        const t = performance.now();
        const claimed = await claimBatch(sql, {
          leaseToken: crypto.randomUUID(),
          leaseSeconds: 60,
          batchSize: 100,
          perAggregateLimit: 10,
          ordering: 'aggregate',
          deadLetterPolicy: 'continue',
        });
        samples.push(performance.now() - t);
        claimedCold.push(claimed.filter((c) => c.aggregateId.startsWith('cold-')).length);
        await sql`update outbox.outbox set lease_token = null, lease_expires_at = null, attempts = 0 where id = any(${claimed.map((c) => c.id)}::int8[])`;
      }
      log(`claim: ${label}`);
      return {
        p50: Number(pct(samples, 50).toFixed(2)),
        p99: Number(pct(samples, 99).toFixed(2)),
        first: Number((samples[0] ?? 0).toFixed(2)),
        /** Heads of cold aggregates in the first claim (the hot one's backlog at the front). */
        firstCold: claimedCold[0] ?? 0,
      };
    };
    await reset();
    await seed(10_000);
    const empty = await measureClaims('no published history');
    await sql`
      insert into outbox.outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload, published_at)
      select 'old', g::text, 1, 'OrderPlaced', 'bench.orders', '{}'::jsonb, now() - interval '1 day'
      from generate_series(1, ${params.bloatRows}) g`;
    await sql`analyze outbox`;
    const history = await measureClaims(`${params.bloatRows} published rows`);

    // A hot aggregate with a 100,000-event backlog at the front of the queue, then 10,000 cold
    // aggregates: parking keeps the head walk from stepping over the backlog on every claim (each
    // claim here hands its rows back, as a relay that failed would; parks stay, a lease length).
    await reset();
    await seed(100_000, 'hot-', 100_000);
    await seed(10_000, 'cold-');
    const hot = await measureClaims('a hot aggregate with a 100,000-event backlog ahead of 10,000 others');

    // A transaction held open elsewhere keeps VACUUM from removing dead tuples while rows are relayed.
    await reset();
    await seed(params.gridRows);
    const holder = postgres(dbUrl, { max: 1, onnotice: () => {} });
    let holderPid = 0;
    const held = holder
      .begin(async (tx) => {
        const [me] = await tx<
          { pid: number; xid: string }[]
        >`select pg_backend_pid() as pid, txid_current()::text as xid`;
        holderPid = me?.pid ?? 0;
        await tx`select pg_sleep(3600)`;
      })
      .catch(() => {});
    while (holderPid === 0) await new Promise((r) => setTimeout(r, 10));
    await runRelayProcess();
    await seed(10_000, 'after-');
    const bloated = await measureClaims(
      `after relaying ${params.gridRows} rows with a transaction held open`,
    );
    // Cancel, not terminate: a terminated connection can crash the driver (porsager/postgres#1154).
    await sql`select pg_cancel_backend(${holderPid})`;
    await held;
    await holder.end({ timeout: 1 });
    results.claim = { empty, history, hot, bloated, historyRows: params.bloatRows };
    report(
      `### Claim latency (100 heads, ms)\n\n| table | p50 | p99 |\n|---|---|---|\n| 10,000 pending, no history | ${empty.p50} | ${empty.p99} |\n| + ${params.bloatRows.toLocaleString('en')} published rows | ${history.p50} (${(history.p50 / empty.p50).toFixed(2)}×) | ${history.p99} |\n| a hot aggregate's 100,000-event backlog ahead of 10,000 others | ${hot.p50} (first claim ${hot.first}, ${hot.firstCold} cold heads) | ${hot.p99} |\n| after relaying ${params.gridRows} rows under a held-open transaction | ${bloated.p50} | ${bloated.p99} |`,
    );
  }
}
