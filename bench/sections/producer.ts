import { enqueue } from '../../shared/producer/index.ts';
import type { Bench } from '../support/bench.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runProducer(bench: Bench): Promise<void> {
  const { params, results, sql, reset, pct, report, want } = bench;
  // 7. Producer cost: a one-insert business transaction with and without enqueue.
  if (want('producer')) {
    await reset();
    await sql`create table if not exists bench_orders (id bigint generated always as identity primary key, total int not null)`;
    const measure = async (withEnqueue: boolean) => {
      const samples: number[] = [];
      for (let i = 0; i < params.producerTxns; i++) {
        const t = performance.now();
        await sql.begin(async (tx) => {
          await tx`insert into bench_orders (total) values (${i})`;
          if (withEnqueue)
            await enqueue(tx, {
              type: 'OrderPlaced',
              source: 'bench.orders',
              aggregateType: 'order',
              aggregateId: String(i),
              payload: { total: i },
            });
        });
        samples.push(performance.now() - t);
      }
      return { p50: Number(pct(samples, 50).toFixed(3)), p99: Number(pct(samples, 99).toFixed(3)) };
    };
    await measure(false); // warm-up
    const without = await measure(false);
    const withIt = await measure(true);
    const without2 = await measure(false);
    results.producer = { without, with: withIt, withoutAgain: without2 };
    report(
      `### Producer cost, ${params.producerTxns} transactions each (ms)\n\n| business transaction | p50 | p99 |\n|---|---|---|\n| insert only | ${without.p50} | ${without.p99} |\n| insert + enqueue | ${withIt.p50} | ${withIt.p99} |\n| insert only (again) | ${without2.p50} | ${without2.p99} |\n| **enqueue adds (p50)** | **${(withIt.p50 - (without.p50 + without2.p50) / 2).toFixed(3)}** | |`,
    );
  }
}
