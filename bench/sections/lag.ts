import { connect } from '../../shared/platform/index.ts';
import { enqueue } from '../../shared/producer/index.ts';
import type { Bench } from '../support/bench.ts';
import { startMeasured } from '../support/processes.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runLag(bench: Bench): Promise<void> {
  const { params, root, results, defaults, bus, busEnv, dbUrl, reset, pct, report, log, want } = bench;
  // 5. Lag from commit to bus at a steady offered load, default settings.
  if (want('lag')) {
    await bus.setFaults({ latencyMs: 20 });
    await reset();
    const committedAt = new Map<string, number>();
    const relay = startMeasured({
      args: [`${root}shared/relay/bin/outbox.js`, 'relay', '--quiet'],
      env: busEnv,
    });
    log(`lag: ${params.lagRate} events/s for ${params.lagSeconds} s`);
    const producerSql = connect({ url: dbUrl, max: 8, env: {} });
    const start = performance.now();
    let sent = 0;
    const inflight = new Set<Promise<void>>();
    while (performance.now() - start < params.lagSeconds * 1000) {
      const due = Math.floor(((performance.now() - start) / 1000) * params.lagRate);
      while (sent < due) {
        sent++;
        const p = producerSql
          .begin((tx) =>
            enqueue(tx, {
              type: 'OrderPlaced',
              source: 'bench.orders',
              aggregateType: 'order',
              aggregateId: String(sent % 5_000),
              payload: { n: sent },
            }),
          )
          .then((r) => {
            committedAt.set(r.eventId, Date.now());
          })
          .finally(() => inflight.delete(p));
        inflight.add(p);
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    await Promise.all(inflight);
    await new Promise((r) => setTimeout(r, 2_000));
    relay.child.kill('SIGINT');
    await relay.done;
    await producerSql.end();
    const lags: number[] = [];
    for (const e of await bus.events()) {
      const c = committedAt.get((e.detail as { metadata: { eventId: string } }).metadata.eventId);
      if (c !== undefined) lags.push(e.receivedAt - c);
    }
    const summary = {
      offered: sent,
      delivered: lags.length,
      p50: pct(lags, 50),
      p99: pct(lags, 99),
      max: pct(lags, 100),
    };
    results.lag = summary;
    report(
      `### Commit-to-bus lag, ${params.lagRate} events/s offered for ${params.lagSeconds} s, 20 ms bus latency, default settings (poll ${defaults.pollIntervalMs} ms)\n\n| offered | delivered | p50 | p99 | max |\n|---|---|---|---|---|\n| ${summary.offered} | ${summary.delivered} | ${summary.p50} ms | ${summary.p99} ms | ${summary.max} ms |`,
    );
  }
}
