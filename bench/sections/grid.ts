import type { Bench } from '../support/bench.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runGrid(bench: Bench): Promise<void> {
  const { params, results, bus, reset, seed, rate, report, log, want, runRelayProcess, ourFixedUs } = bench;
  // 4. Grid: batch size × PutEvents concurrency at 20 ms.
  if (want('grid')) {
    await bus.setFaults({ latencyMs: 20 });
    const header = `| batch \\ concurrency | ${params.grid.concurrency.join(' | ')} |`;
    const rows = [header, `|---|${params.grid.concurrency.map(() => '---').join('|')}|`];
    const out: unknown[] = [];
    for (const batch of params.grid.batch) {
      const cells: string[] = [];
      for (const concurrency of params.grid.concurrency) {
        await reset();
        await seed(params.gridRows);
        log(`grid: batch ${batch}, concurrency ${concurrency}`);
        const r = await runRelayProcess({
          OUTBOX_BATCH_SIZE: String(batch),
          OUTBOX_PUBLISH_CONCURRENCY: String(concurrency),
        });
        const got = Math.round(r.published / r.runSeconds);
        const cpu = Math.round((r.cpuUs - ourFixedUs()) / r.published);
        const bound = rate(concurrency * 10, 20);
        cells.push(`${got} (${Math.round((got / bound) * 100)} % of ${bound}; ${cpu} µs)`);
        out.push({ batch, concurrency, eventsPerSecond: got, bound, cpuPerEventUs: cpu });
      }
      rows.push(`| ${batch} | ${cells.join(' | ')} |`);
    }
    results.grid = out;
    report(
      `### Batch size × PutEvents concurrency at 20 ms bus latency (events/s, share of the bound concurrency × 10 × 1000 / 20; CPU per event)\n\n${rows.join('\n')}`,
    );
  }
}
