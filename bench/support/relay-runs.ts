/**
 * The relay as a process for the bench: `outbox relay --until-empty` of this checkout (and of a
 * `--baseline` checkout, alternately, so both meet the same machine), its CPU and peak RSS
 * recorded at exit by the usage preload, and the figures per event.
 */
import { execFileSync } from 'node:child_process';
import type { BenchEnvironment } from './environment.ts';
import { type Measured, median, runMeasured } from './processes.ts';
import { load, log } from './report.ts';

/** A checkout whose relay is measured (its own node_modules installed). */
export interface Checkout {
  label: string;
  dir: string;
}

/** One `outbox relay` process over what is in the outbox. */
export interface RelayRun {
  published: number;
  /** The run as the relay timed it (its summary line: connect to exit), seconds. */
  runSeconds: number;
  cpuUs: number;
  maxRssMB: number;
  wallMs: number;
}

/** One checkout's relay at one bus latency: medians over the runs. */
export interface RelayFigures {
  checkout: string;
  latency: number;
  events: number;
  eventsPerSecond: number;
  /** (process CPU − CPU of a run over an empty outbox) / events, µs: the CPU the events cost. */
  cpuPerEventUs: number;
  eventsPerCpuSecond: number;
  /** Process CPU / events, µs, start-up included. */
  processCpuPerEventUs: number;
  /** CPU of a run over an empty outbox, ms. */
  fixedCpuMs: number;
  peakRssMB: number;
  runs: number;
  loadPerCore: number;
}

/**
 * The relay runs of a bench.
 * @param root this checkout, with a trailing slash
 * @param baselineDir another checkout, with a trailing slash, measured beside this one
 */
export function relayRuns(env: BenchEnvironment, root: string, baselineDir: string | undefined) {
  const { bus, busEnv, reset, seed } = env;
  const checkouts: Checkout[] = [{ label: 'this checkout', dir: root }];
  if (baselineDir) {
    const head = execFileSync('git', ['-C', baselineDir, 'log', '-1', '--format=%h %s'], {
      encoding: 'utf8',
    });
    checkouts.push({ label: `baseline ${head.trim().split(' ')[0]}`, dir: baselineDir });
  }
  /** CPU of a run over an empty outbox, µs, by checkout directory ({@link measureFixedCpu}). */
  const relayFixedUs = new Map<string, number>();
  /** This checkout's figures by bus latency, kept for the chart. */
  const relayAt = new Map<number, RelayFigures>();

  async function runRelayProcess(
    env: Record<string, string> = {},
    nodeArgs: string[] = [],
    args = ['--until-empty'],
    dir = root,
  ): Promise<RelayRun> {
    const r: Measured = await runMeasured({
      nodeArgs,
      args: [`${dir}shared/relay/bin/outbox.js`, 'relay', ...args, '--quiet'],
      env: { ...busEnv, ...env },
      keepStdout: true,
    });
    const m = /after ([\d.]+) s: published (\d+)/.exec(r.stdout);
    if (!m) throw new Error(`unexpected relay output: ${r.stdout}`);
    return {
      published: Number(m[2]),
      runSeconds: Number(m[1]),
      cpuUs: r.usage.cpuUs,
      maxRssMB: Math.round(r.usage.maxRssKiB / 1024),
      wallMs: r.wallMs,
    };
  }
  /** CPU of a relay process that finds the outbox empty: start-up, one claim, exit (median of 3). */
  async function relayFixedCpuUs(dir = root): Promise<number> {
    await reset();
    const runs: number[] = [];
    for (let i = 0; i < 3; i++) runs.push((await runRelayProcess({}, [], ['--until-empty'], dir)).cpuUs);
    return median(runs);
  }
  /** Runs each checkout's relay `repeats` times over `rows` events, alternating checkouts; medians. */
  async function measureRelay(
    latency: number,
    rows: number,
    repeats: number,
    among: Checkout[] = checkouts.slice(0, 1),
    perAggregate = 1,
  ): Promise<RelayFigures[]> {
    await bus.setFaults({ latencyMs: latency });
    const runs = new Map<string, RelayRun[]>(among.map((c) => [c.dir, []]));
    const loadAtStart = load();
    for (let i = 0; i < repeats; i++) {
      for (const c of among) {
        await reset();
        await seed(rows, '', perAggregate);
        log(
          `relay (${c.label}): ${rows} rows (${perAggregate} per aggregate) at ${latency} ms, run ${i + 1} of ${repeats}`,
        );
        const r = await runRelayProcess({}, [], ['--until-empty'], c.dir);
        const accepted = (await bus.stats()).accepted;
        if (r.published !== rows || accepted < rows) {
          throw new Error(`relay published ${r.published} and the bus accepted ${accepted} of ${rows}`);
        }
        runs.get(c.dir)?.push(r);
      }
    }
    const loadPerCore = Number(((loadAtStart + load()) / 2).toFixed(2));
    return among.map((c) => {
      const these = runs.get(c.dir) ?? [];
      const fixed = relayFixedUs.get(c.dir) ?? 0;
      const cpu = median(these.map((r) => (r.cpuUs - fixed) / r.published));
      return {
        checkout: c.label,
        latency,
        events: rows,
        eventsPerSecond: median(these.map((r) => Math.round(r.published / r.runSeconds))),
        cpuPerEventUs: Math.round(cpu),
        eventsPerCpuSecond: Math.round(1e6 / cpu),
        processCpuPerEventUs: Math.round(median(these.map((r) => r.cpuUs / r.published))),
        fixedCpuMs: Math.round(fixed / 1000),
        peakRssMB: median(these.map((r) => r.maxRssMB)),
        runs: repeats,
        loadPerCore,
      };
    });
  }
  /** Measures {@link relayFixedUs} for `among` (this checkout, or every one). */
  async function measureFixedCpu(among: Checkout[]): Promise<void> {
    for (const c of among) {
      log(`relay (${c.label}): CPU of a run over an empty outbox (start-up, one claim, exit)`);
      relayFixedUs.set(c.dir, await relayFixedCpuUs(c.dir));
    }
  }
  const ourFixedUs = () => relayFixedUs.get(root) ?? 0;
  return {
    checkouts,
    relayFixedUs,
    relayAt,
    runRelayProcess,
    relayFixedCpuUs,
    measureRelay,
    measureFixedCpu,
    ourFixedUs,
  };
}
