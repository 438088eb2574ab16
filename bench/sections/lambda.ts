import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Bench } from '../support/bench.ts';
import type { LambdaAsset } from '../support/bundle.ts';
import { lambdaNodeArgs } from '../support/lambda-host.ts';
import { median, SCRIPTS, startMeasured } from '../support/processes.ts';
import { LAMBDA_PRICE, recommendedMemory, SIZING_MEMORY_MB, sizingRow } from '../support/sizing.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runLambda(bench: Bench): Promise<void> {
  const {
    params,
    root,
    checkouts,
    results,
    defaults,
    bus,
    reset,
    seed,
    report,
    log,
    MB,
    want,
    assets,
    lambdaEnv,
    hostInit,
  } = bench;
  const asset = bench.assets.get(bench.root);
  // 9. The bundled handler over 100,000 events at 128, 256 and 512 MB, invoked as Lambda invokes it.
  const lambdaPeakRss = new Map<number, number>();
  let lambdaEventsPerCpuSecond: number | undefined;
  async function runLambda(a: LambdaAsset, memoryMb: number, rows: number, latency: number) {
    await bus.setFaults({ latencyMs: latency });
    await reset();
    await seed(rows);
    const dir = mkdtempSync(join(tmpdir(), 'outbox-host-'));
    const file = join(dir, 'host.jsonl');
    const { child, done } = startMeasured({
      nodeArgs: lambdaNodeArgs(memoryMb),
      args: [SCRIPTS.lambdaHost],
      sampleMs: 100,
      env: { ...lambdaEnv(a, memoryMb), OUTBOX_BENCH_HOST_FILE: file },
    });
    const progress: [number, number][] = [];
    const started = Date.now();
    let exited = false;
    void done
      .catch(() => {})
      .finally(() => {
        exited = true;
      });
    for (;;) {
      await new Promise((r) => setTimeout(r, 200));
      const accepted = (await bus.stats()).accepted;
      progress.push([Date.now(), accepted]);
      if (accepted >= rows || exited) break;
    }
    const seconds = (Date.now() - started) / 1000;
    child.kill('SIGUSR2');
    const r = await done;
    const host = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number | string>);
    rmSync(dir, { recursive: true, force: true });
    const initLine = host.find((h) => h.phase === 'init') as Record<string, number>;
    const accepted = progress[progress.length - 1]?.[1] ?? 0;
    if (accepted < rows)
      throw new Error(`the handler published ${accepted} of ${rows}: ${r.stderr.slice(-2000)}`);
    // Memory against progress: the samples taken while the backlog was still above 80 % of its
    // start, and those after it fell below 20 %.
    const acceptedAt = (t: number) => {
      let n = 0;
      for (const [pt, pa] of progress) if (pt <= t) n = pa;
      return n;
    };
    const early = r.usage.samples.filter(([t]) => {
      const n = acceptedAt(t);
      return n > 0 && n < rows * 0.2;
    });
    const late = r.usage.samples.filter(([t]) => acceptedAt(t) >= rows * 0.8);
    const peakOf = (xs: [number, number, number, number, number][], i: 1 | 2) =>
      MB(Math.max(0, ...xs.map((x) => x[i])));
    return {
      memoryMb,
      rows,
      latency,
      eventsPerSecond: Math.round(rows / seconds),
      peakRssMB: Math.round(r.usage.maxRssKiB / 1024),
      peakHeapUsedMB: MB(r.usage.peak.heapUsed),
      peakHeapTotalMB: MB(r.usage.peak.heapTotal),
      rssAfterInitMB: MB(initLine.rss as number),
      initMs: Math.round(initLine.importMs as number),
      processCpuPerEventUs: Math.round(r.usage.cpuUs / rows),
      cpuUs: r.usage.cpuUs,
      invocations: host.filter((h) => h.phase === 'invoke').length + 1,
      earlyPeakRssMB: peakOf(early, 1),
      earlyPeakHeapMB: peakOf(early, 2),
      latePeakRssMB: peakOf(late, 1),
      latePeakHeapMB: peakOf(late, 2),
    };
  }
  if (want('lambda') && asset) {
    const out: (Awaited<ReturnType<typeof runLambda>> & { checkout: string })[] = [];
    for (const memoryMb of params.lambdaMemory) {
      for (const c of checkouts) {
        log(`lambda (${c.label}): ${memoryMb} MB, ${params.lambdaRows} rows at 0 ms`);
        const f = await runLambda(assets.get(c.dir) as LambdaAsset, memoryMb, params.lambdaRows, 0);
        if (c.dir === root) lambdaPeakRss.set(memoryMb, f.peakRssMB);
        out.push({ ...f, checkout: c.label });
      }
    }
    // CPU per event of the bundled handler at 20 ms, for the sizing table (start-up excluded).
    log(`lambda: 256 MB, ${params.lambdaCpuRows} rows at 20 ms`);
    const cpuRun = await runLambda(asset, 256, params.lambdaCpuRows, 20);
    const initRuns: number[] = [];
    for (let i = 0; i < 3; i++) initRuns.push((await hostInit(asset, 'init', 256, {})).cpuUs);
    const initCpu = median(initRuns);
    const cpuPerEvent = (cpuRun.cpuUs - initCpu) / params.lambdaCpuRows;
    lambdaEventsPerCpuSecond = Math.round(1e6 / cpuPerEvent);
    results.lambda = { runs: out, at20ms: { ...cpuRun, cpuPerEventUs: Math.round(cpuPerEvent) } };
    const many = checkouts.length > 1;
    report(
      `### The bundled relay handler over ${params.lambdaRows.toLocaleString('en')} events, invoked as Lambda invokes it (0 ms bus latency)

  | memory (heap limits as Lambda sets them)${many ? ' | checkout' : ''} | peak RSS | peak heap used / total | RSS after init | peak heap: backlog > 80 % → < 20 % | peak RSS: backlog > 80 % → < 20 % | events/s | CPU per event | invocations |
  |---|${many ? '---|' : ''}---|---|---|---|---|---|---|---|
  ${out
    .map(
      (f) =>
        `| ${f.memoryMb} MB (${lambdaNodeArgs(f.memoryMb).slice(2).join(' ')})${many ? ` | ${f.checkout}` : ''} | **${f.peakRssMB} MB** | ${f.peakHeapUsedMB} / ${f.peakHeapTotalMB} MB | ${f.rssAfterInitMB} MB | ${f.earlyPeakHeapMB} → ${f.latePeakHeapMB} MB | ${f.earlyPeakRssMB} → ${f.latePeakRssMB} MB | ${f.eventsPerSecond} | ${f.processCpuPerEventUs} µs | ${f.invocations} |`,
    )
    .join('\n')}

  The host imports \`index.mjs\` from the relay's asset in \`cdk.out\` with the function's synthesised environment (NODE_OPTIONS included), in a process started with the runtime bootstrap's flags for that memory, then invokes the handler with a scheduler-shaped event and a context whose deadline is the function's timeout (60 s), again and again as a warm container would, until the bus has every event. Peak RSS is the process's getrusage maximum; heap figures are sampled every 100 ms. Lambda's own runtime client, which shares the process, is not included (a few MB). CPU per event includes init. At 20 ms (256 MB, ${params.lambdaCpuRows} events): ${cpuRun.eventsPerSecond} events/s, ${Math.round(cpuPerEvent)} µs of CPU per event after init, ${lambdaEventsPerCpuSecond} events per CPU-second.`,
    );
  }

  // 10. Lambda sizing from the measured figures.
  if (want('lambda') && lambdaEventsPerCpuSecond) {
    const rows = SIZING_MEMORY_MB.map((m) =>
      sizingRow(m, lambdaEventsPerCpuSecond as number, 20, defaults.publishConcurrency),
    );
    const recommended = recommendedMemory(rows, (m) => lambdaPeakRss.get(m));
    results.sizing = { eventsPerCpuSecond: lambdaEventsPerCpuSecond, price: LAMBDA_PRICE, rows, recommended };
    report(
      `### Lambda sizing at 20 ms bus latency (projected from ${lambdaEventsPerCpuSecond} events per CPU-second, the bundled handler's figure above)

  | memory | CPU share | CPU bound | PutEvents bound | projected events/s | limited by | cost per million events | always-on cost per month |
  |---|---|---|---|---|---|---|---|
  ${rows
    .map(
      (r) =>
        `| ${r.memoryMb} MB${r.memoryMb === recommended ? ' (recommended)' : ''} | ${(r.cpuShare * 100).toFixed(1)} % | ${Math.round(r.cpuBound)} | ${Math.round(r.putEventsBound)} | **${Math.round(r.projected)}** | ${r.limitedBy} | $${r.usdPerMillionEvents.toFixed(4)} | $${r.usdPerMonthAlwaysOn.toFixed(2)} |`,
    )
    .join('\n')}

  CPU share = memory / 1,769 MB (one vCPU at 1,769 MB). PutEvents bound = concurrency (${defaults.publishConcurrency}) × 10 entries × 1000 / 20 ms. Duration price $${LAMBDA_PRICE.perGbSecondUsd} per GB-second (${LAMBDA_PRICE.architecture}, ${LAMBDA_PRICE.region}, first tier, as of ${LAMBDA_PRICE.asOf}); requests ($${LAMBDA_PRICE.perMillionRequestsUsd} per million) add one per minute. "Always-on": the schedule keeps one invocation polling at all times. Measured on this machine's x86 cores; Graviton's figure per event will differ.`,
    );
  }
}
