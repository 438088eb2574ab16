import type { Bench, RelayFigures } from '../support/bench.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runRelayCpu(bench: Bench): Promise<void> {
  const { params, checkouts, results, defaults, report, want, measureRelay, relayFixedUs, relayAt } = bench;
  // 1. CPU per event, events/s and peak RSS of `outbox relay --until-empty` at the defaults.
  if (want('relay')) {
    const rows: string[] = [];
    const all: RelayFigures[] = [];
    for (const latency of [0, 20]) {
      const figures = await measureRelay(latency, params.rows, params.repeats, checkouts);
      const [ours] = figures;
      if (ours) relayAt.set(latency, ours);
      all.push(...figures);
      for (const f of figures) {
        rows.push(
          `| ${latency} ms${checkouts.length > 1 ? ` | ${f.checkout}` : ''} | ${f.eventsPerSecond} | ${f.cpuPerEventUs} µs | ${f.eventsPerCpuSecond} | ${f.processCpuPerEventUs} µs | ${f.peakRssMB} MB | ${f.loadPerCore} |`,
        );
      }
    }
    results.relay = { byLatency: all };
    const checkoutColumn = checkouts.length > 1 ? ' | checkout' : '';
    report(
      `### The relay's CPU per event: \`outbox relay --until-empty\`, ${params.rows} events (one aggregate each), default settings, median of ${params.repeats}

  | bus latency${checkoutColumn} | events/s | CPU per event (user + sys) | events per CPU-second | whole process per event | peak RSS | load per core |
  |---|${checkouts.length > 1 ? '---|' : ''}---|---|---|---|---|---|
  ${rows.join('\n')}

  CPU per event is the relay process's \`process.cpuUsage()\` minus that of the same command over an empty outbox (${checkouts.map((c) => `${Math.round((relayFixedUs.get(c.dir) ?? 0) / 1000)} ms`).join(' and ')}: Node start-up, loading the CLI from TypeScript sources, one claim, exit), divided by the events; "whole process" divides it all. Events/s is the relay's own run time. The CLI runs from TypeScript sources, so its RSS includes Node's type stripper (about 17 MB) and the whole CLI; the Lambda bundle's memory is measured below.${checkouts.length > 1 ? ' The checkouts ran alternately, each over a freshly seeded outbox.' : ''}`,
    );
  }

  // 1b. Aggregates with several events: a pass sends them in rounds, and before each round after
  // the first the relay spends the successors' attempts (one statement per round).
  if (want('rounds')) {
    const perAggregate = defaults.perAggregateLimit;
    const rows: string[] = [];
    const all: RelayFigures[] = [];
    for (const latency of [0, 20]) {
      const figures = await measureRelay(latency, params.rows, params.repeats, checkouts, perAggregate);
      all.push(...figures);
      for (const f of figures) {
        rows.push(
          `| ${latency} ms${checkouts.length > 1 ? ` | ${f.checkout}` : ''} | ${f.eventsPerSecond} | ${f.cpuPerEventUs} µs | ${f.processCpuPerEventUs} µs | ${f.loadPerCore} |`,
        );
      }
    }
    results.rounds = { perAggregate, byLatency: all };
    const checkoutColumn = checkouts.length > 1 ? ' | checkout' : '';
    report(
      `### Rounds: \`outbox relay --until-empty\`, ${params.rows} events, ${perAggregate} per aggregate, default settings, median of ${params.repeats}

  | bus latency${checkoutColumn} | events/s | CPU per event (user + sys) | whole process per event | load per core |
  |---|${checkouts.length > 1 ? '---|' : ''}---|---|---|---|
  ${rows.join('\n')}

  Each pass claims ${defaults.batchSize} aggregates with ${perAggregate} events each and sends them in ${perAggregate} rounds, one event per aggregate per round; rounds 2 to ${perAggregate} start with one statement that spends the successors' attempts.${checkouts.length > 1 ? ' The checkouts ran alternately, each over a freshly seeded outbox.' : ''}`,
    );
  }
}
