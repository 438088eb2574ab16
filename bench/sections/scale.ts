import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import type { Bench } from '../support/bench.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runScale(bench: Bench): Promise<void> {
  const { params, results, bus, reset, seed, rate, report, log, want, runRelayProcess } = bench;
  // 11. Scale-out: 1, 2 and 4 relay processes over the same backlog at 20 ms.
  /** Busy and total jiffies of all cores, from /proc/stat. */
  function cpuJiffies(): { busy: number; total: number } {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (f[3] ?? 0) + (f[4] ?? 0);
    const total = f.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  }
  if (want('scale')) {
    await bus.setFaults({ latencyMs: 20 });
    const out: {
      relays: number;
      eventsPerSecond: number;
      machineCpuBusy: number;
      relayCpuCores: number;
      busCpuCores: number;
      minShare: number;
    }[] = [];
    for (const k of params.scaleRelays) {
      await reset();
      await seed(params.scaleRows);
      log(`scale: ${k} relay process(es) over ${params.scaleRows} rows at 20 ms`);
      const before = cpuJiffies();
      const busBefore = bus.cpuMs();
      const t = performance.now();
      const runs = await Promise.all(Array.from({ length: k }, () => runRelayProcess()));
      const ms = performance.now() - t;
      const after = cpuJiffies();
      const busCores = (bus.cpuMs() - busBefore) / ms;
      const published = runs.reduce((n, r) => n + r.published, 0);
      if (published < params.scaleRows)
        throw new Error(`scale-out published ${published} of ${params.scaleRows}`);
      out.push({
        relays: k,
        eventsPerSecond: rate(published, ms),
        machineCpuBusy: Math.round(((after.busy - before.busy) / (after.total - before.total)) * 100),
        relayCpuCores: Number((runs.reduce((n, r) => n + r.cpuUs, 0) / 1000 / ms).toFixed(2)),
        busCpuCores: Number(busCores.toFixed(2)),
        minShare: Math.min(...runs.map((r) => r.published)) / published,
      });
    }
    const single = out[0]?.eventsPerSecond ?? 1;
    results.scale = out;
    report(
      `### Scale-out: relay processes over the same ${params.scaleRows.toLocaleString('en')}-event backlog at 20 ms

  | relays | events/s | per relay, share of one relay's figure | speed-up | machine CPU busy | relays' CPU (cores) | local bus CPU (cores) | smallest relay's share of the events |
  |---|---|---|---|---|---|---|---|
  ${out
    .map(
      (o) =>
        `| ${o.relays} | ${o.eventsPerSecond} | ${Math.round((o.eventsPerSecond / o.relays / single) * 100)} % | ${(o.eventsPerSecond / single).toFixed(2)}× | ${o.machineCpuBusy} % | ${o.relayCpuCores} | ${o.busCpuCores} | ${Math.round(o.minShare * 100)} % |`,
    )
    .join('\n')}

  Events/s from the start of the first relay to the end of the last (start-up included). Machine CPU busy is all ${cpus().length} cores from /proc/stat over the run: the relays, the local bus, Postgres and whatever else runs on the machine.`,
    );
  }
}
