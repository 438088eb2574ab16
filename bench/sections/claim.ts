import postgres from 'postgres';
import { claimBatch } from '../../shared/relay/sql/index.ts';
import type { Bench } from '../support/bench.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runClaim(b: Bench): Promise<void> {
  const { P, results, sql, bus, dbUrl, reset, seed, pct, report, log, want, runRelayProcess } = b;
  // 6. Claim latency: empty history vs a large published history, and under a held-open transaction.
  if (want('claim')) {
    await bus.setFaults({});
    const measureClaims = async (label: string) => {
      const samples: number[] = [];
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
        await sql`update outbox set lease_token = null, lease_expires_at = null, attempts = 0 where id = any(${claimed.map((c) => c.id)}::int8[])`;
      }
      log(`claim: ${label}`);
      return { p50: Number(pct(samples, 50).toFixed(2)), p99: Number(pct(samples, 99).toFixed(2)) };
    };
    await reset();
    await seed(10_000);
    const empty = await measureClaims('no published history');
    await sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload, published_at)
      select 'old', g::text, 1, 'OrderPlaced', 'bench.orders', '{}'::jsonb, now() - interval '1 day'
      from generate_series(1, ${P.bloatRows}) g`;
    await sql`analyze outbox`;
    const history = await measureClaims(`${P.bloatRows} published rows`);

    // A transaction held open elsewhere keeps VACUUM from removing dead tuples while rows are relayed.
    await reset();
    await seed(P.gridRows);
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
    const bloated = await measureClaims(`after relaying ${P.gridRows} rows with a transaction held open`);
    // Cancel, not terminate: a terminated connection can crash the driver (porsager/postgres#1154).
    await sql`select pg_cancel_backend(${holderPid})`;
    await held;
    await holder.end({ timeout: 1 });
    results.claim = { empty, history, bloated, historyRows: P.bloatRows };
    report(
      `### Claim latency (100 heads, ms)\n\n| table | p50 | p99 |\n|---|---|---|\n| 10,000 pending, no history | ${empty.p50} | ${empty.p99} |\n| + ${P.bloatRows.toLocaleString('en')} published rows | ${history.p50} (${(history.p50 / empty.p50).toFixed(2)}×) | ${history.p99} |\n| after relaying ${P.gridRows} rows under a held-open transaction | ${bloated.p50} | ${bloated.p99} |`,
    );
  }
}
