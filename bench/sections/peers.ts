import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import {
  PGTO_TUNED,
  type PgtoSettings,
  seedPgTransactionalOutbox,
  setUpPgTransactionalOutbox,
} from '../pg-transactional-outbox.ts';
import type { Bench, RelayFigures } from '../support/bench.ts';
import { lineChart } from '../support/chart.ts';
import { median, runMeasured } from '../support/processes.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runPeers(bench: Bench): Promise<void> {
  const {
    params,
    root,
    results,
    defaults,
    sql,
    bus,
    busEnv,
    reset,
    seed,
    rate,
    report,
    log,
    want,
    measureRelay,
    relayAt,
  } = bench;
  // 2. The peers, each a process of its own, at three bus latencies.
  interface PeerFigures {
    eventsPerSecond: number;
    cpuPerEventUs: number;
    published: number;
  }
  async function runPeer(args: string[], fixedUs: number): Promise<PeerFigures> {
    const r = await runMeasured({ args, env: busEnv, keepStdout: true });
    const out = JSON.parse(r.stdout.trim().split('\n').pop() as string) as { published: number; ms: number };
    return {
      eventsPerSecond: rate(out.published, out.ms),
      cpuPerEventUs: Math.round((r.usage.cpuUs - fixedUs) / Math.max(out.published, 1)),
      published: out.published,
    };
  }
  const pgtoArgs = (n: number, budget: number, s: PgtoSettings) => [
    `${root}bench/pg-transactional-outbox.ts`,
    String(n),
    String(budget),
    JSON.stringify(s),
  ];
  const naiveArgs = (budget: number) => [`${root}bench/naive-relay.ts`, String(budget)];
  const chartData: {
    latency: number;
    ours: PeerFigures;
    naive: PeerFigures;
    pgto: PeerFigures;
  }[] = [];
  if (want('peers')) {
    await setUpPgTransactionalOutbox(sql);
    await reset();
    await seedPgTransactionalOutbox(sql, 0);
    const fixedCpu = async (args: string[]) => {
      const runs: number[] = [];
      for (let i = 0; i < 3; i++) runs.push((await runMeasured({ args, env: busEnv })).usage.cpuUs);
      return median(runs);
    };
    const naiveFixed = await fixedCpu(naiveArgs(0));
    const pgtoFixed = await fixedCpu(pgtoArgs(0, 0, PGTO_TUNED));
    let pgto = PGTO_TUNED;
    if (params.pgtoGrid.length > 0) {
      // Tuning grid at 20 ms: pick the best throughput, as a user following the library's README would.
      await bus.setFaults({ latencyMs: 20 });
      const tried: { settings: PgtoSettings; eventsPerSecond: number }[] = [];
      for (const s of params.pgtoGrid) {
        await seedPgTransactionalOutbox(sql, params.rows);
        log(`peers: pg-transactional-outbox tuning ${JSON.stringify(s)}`);
        tried.push({
          settings: s,
          eventsPerSecond: (await runPeer(pgtoArgs(params.rows, 8_000, s), pgtoFixed)).eventsPerSecond,
        });
      }
      tried.sort((a, b) => b.eventsPerSecond - a.eventsPerSecond);
      pgto = tried[0]?.settings ?? PGTO_TUNED;
      results.pgtoTuning = tried;
      report(
        `### pg-transactional-outbox tuning at 20 ms (events/s)\n\n| batch size | polling interval | handler pool | events/s |\n|---|---|---|---|\n${tried
          .map(
            (t) =>
              `| ${t.settings.batchSize} | ${t.settings.pollingIntervalMs} ms | ${t.settings.poolSize} | ${t.eventsPerSecond} |`,
          )
          .join('\n')}`,
      );
    }
    const rows: string[] = [];
    for (const latency of params.latencies) {
      const n = latency >= 100 ? params.slowRows : params.rows;
      const ours = relayAt.get(latency) ?? ((await measureRelay(latency, n, 1))[0] as RelayFigures);
      await bus.setFaults({ latencyMs: latency });
      await reset();
      await seed(n);
      log(`peers: naive baseline at ${latency} ms (budget ${params.peerBudgetMs} ms)`);
      const naive = await runPeer(naiveArgs(params.peerBudgetMs), naiveFixed);
      await reset();
      await seedPgTransactionalOutbox(sql, n);
      log(`peers: pg-transactional-outbox at ${latency} ms (budget ${params.peerBudgetMs} ms)`);
      const p = await runPeer(pgtoArgs(n, params.peerBudgetMs, pgto), pgtoFixed);
      await seedPgTransactionalOutbox(sql, 0);
      const oursFig = {
        eventsPerSecond: ours.eventsPerSecond,
        cpuPerEventUs: ours.cpuPerEventUs,
        published: n,
      };
      chartData.push({ latency, ours: oursFig, naive, pgto: p });
      const bound = latency === 0 ? '—' : String(rate(defaults.publishConcurrency * 10, latency));
      rows.push(
        `| ${latency} ms | ${ours.eventsPerSecond} (${ours.cpuPerEventUs} µs) | ${naive.eventsPerSecond} (${naive.cpuPerEventUs} µs) | ${p.eventsPerSecond} (${p.cpuPerEventUs} µs) | ${(ours.eventsPerSecond / Math.max(naive.eventsPerSecond, 1)).toFixed(1)}× | ${(ours.eventsPerSecond / Math.max(p.eventsPerSecond, 1)).toFixed(1)}× | ${bound} |`,
      );
    }
    results.peers = { pgtoSettings: pgto, byLatency: chartData };
    report(
      `### Against the peers: events/s (CPU per event), each a process of its own

  | bus latency | this relay | naive baseline | pg-transactional-outbox | vs naive | vs pg-transactional-outbox | PutEvents bound (4 × 10 × 1000 / ms) |
  |---|---|---|---|---|---|---|
  ${rows.join('\n')}

  This relay at its defaults over ${params.rows} events (${params.slowRows} at 100 ms); the peers over the same kind of backlog for up to ${params.peerBudgetMs / 1000} s each. pg-transactional-outbox's polling listener: one segment per aggregate, \`nextMessagesBatchSize\` ${pgto.batchSize}, \`nextMessagesPollingIntervalInMs\` ${pgto.pollingIntervalMs}, handler pool ${pgto.poolSize} connections (one per message in flight), one PutEvents per message; its polling function looks at the oldest message of every segment on each call, so with one aggregate per event it reads the whole backlog per poll. CPU per event excludes each process's start-up (a run over an empty table).`,
    );
    const svg = lineChart(
      'This relay against the peers',
      chartData.map((d) => `${d.latency} ms`),
      [
        {
          title: 'Throughput',
          unit: 'events/s',
          series: [
            { name: 'this relay', color: '#1f77b4', values: chartData.map((d) => d.ours.eventsPerSecond) },
            {
              name: 'pg-transactional-outbox',
              color: '#ff7f0e',
              values: chartData.map((d) => d.pgto.eventsPerSecond),
            },
            {
              name: 'naive baseline',
              color: '#7f7f7f',
              values: chartData.map((d) => d.naive.eventsPerSecond),
            },
          ],
        },
        {
          title: 'CPU per event (user + system)',
          unit: 'µs per event',
          series: [
            { name: 'this relay', color: '#1f77b4', values: chartData.map((d) => d.ours.cpuPerEventUs) },
            {
              name: 'pg-transactional-outbox',
              color: '#ff7f0e',
              values: chartData.map((d) => d.pgto.cpuPerEventUs),
            },
            { name: 'naive baseline', color: '#7f7f7f', values: chartData.map((d) => d.naive.cpuPerEventUs) },
          ],
        },
      ],
      `npm run bench (${results.profile}), ${cpus().length} cores, Node ${process.version}; local bus in its own process`,
    );
    mkdirSync(`${root}bench/results`, { recursive: true });
    writeFileSync(`${root}bench/results/chart-${results.profile}.svg`, svg);
  }
}
