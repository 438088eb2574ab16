/** The parameters of a bench profile: rows, repeats, latencies and each section's knobs. */
import { PGTO_DEFAULTS } from '../pg-transactional-outbox.ts';

/**
 * The parameters of a profile: rows, repeats, latencies and each section's knobs (quick, or
 * `--full`: more rows and repeats).
 * @param schedulerDelay `model` or `none` (the lambda-lag section)
 */
export function benchParameters(full: boolean, schedulerDelay: string, deployed: DeployedOverrides = {}) {
  const values = { 'scheduler-delay': schedulerDelay };
  const lagRates = deployed.lagRates ?? [100, 1_000];
  const lagBuses = deployed.lagBuses ?? (['classic', 'custom'] as const);
  return {
    rows: full ? 50_000 : 20_000,
    repeats: full ? 5 : 3,
    latencies: [0, 20, 100],
    /** Rows for the 100 ms point of the chart: at the bound of 400 events/s, 20,000 would take 50 s. */
    slowRows: full ? 20_000 : 5_000,
    peerBudgetMs: full ? 20_000 : 6_000,
    pgtoGrid: full
      ? [
          PGTO_DEFAULTS,
          { batchSize: 10, pollingIntervalMs: 10, poolSize: 10 },
          { batchSize: 25, pollingIntervalMs: 10, poolSize: 25 },
          { batchSize: 40, pollingIntervalMs: 10, poolSize: 40 },
          { batchSize: 60, pollingIntervalMs: 10, poolSize: 60 },
        ]
      : [],
    grid: full
      ? { batch: [50, 100, 500], concurrency: [1, 4, 16] }
      : { batch: [100, 500], concurrency: [1, 4, 16] },
    gridRows: full ? 20_000 : 8_000,
    lagRate: 1_000,
    lagSeconds: full ? 60 : 15,
    bloatRows: full ? 1_000_000 : 300_000,
    producerTxns: full ? 5_000 : 2_000,
    lambdaRows: 100_000,
    lambdaMemory: [128, 256, 512],
    lambdaCpuRows: full ? 50_000 : 20_000,
    initRepeats: full ? 9 : 5,
    scaleRows: 100_000,
    scaleRelays: [1, 2, 4],
    /** The lambda-lag section's runs: each rate on each bus (issue 48: p99 at 1,000 events/s). */
    lambdaLagRuns: lagBuses.flatMap((busKind) =>
      lagRates.map((ratePerSecond) => ({ ratePerSecond, busKind })),
    ),
    lambdaLag: {
      ratePerSecond: 100,
      boundaries: full ? 5 : 3,
      busLatencyMs: 20,
      ...(values['scheduler-delay'] === 'none'
        ? { schedulerJitterMs: 0, coldStartExtraMs: 0 }
        : { schedulerJitterMs: 2_000, lateInvocation: { k: 2, ms: 15_000 }, coldStartExtraMs: 1_000 }),
      seed: 19,
      ...(deployed.lagSeconds === undefined ? {} : { durationSeconds: deployed.lagSeconds }),
      trace: deployed.lagTrace ?? false,
    },
    economy: {
      meanGapMs: 15_000,
      periods: full ? 10 : 6,
      busLatencyMs: 20,
      schedulerJitterMs: 2_000,
      coldStartExtraMs: 1_000,
      idleReturnSeconds: 10,
      seed: 21,
    },
    lambdaScale: {
      rows: deployed.scaleRows ?? 50_000,
      relays: deployed.scaleRelays ?? [1, 2, 4],
      busKinds: [...(deployed.scaleBuses ?? ['classic', 'custom'])] as ('classic' | 'custom')[],
      starts: [...(deployed.scaleStarts ?? ['cold'])] as ('cold' | 'warm')[],
      busLatencyMs: 20,
      coldStartExtraMs: 1_000,
      drainTimeoutMs: 300_000,
    },
  };
}

/**
 * The deployed sections' knobs from the command line (bench/run.ts), for a short form on a busy
 * machine: which rates and buses the lag runs, for how long, and the scale-out's backlog.
 */
export interface DeployedOverrides {
  /** `--lag-rates 100,1000`: events/s of the lag runs (default 100 and 1,000). */
  lagRates?: number[];
  /** `--lag-buses classic,custom` (default both). */
  lagBuses?: readonly ('classic' | 'custom')[];
  /** `--lag-seconds n`: how long the producer runs (default: across the boundaries, 195 s). */
  lagSeconds?: number;
  /** `--lag-trace`: record when each event was claimed (a trigger), for the lag's split. */
  lagTrace?: boolean;
  /** `--scale-rows n` (default 50,000). */
  scaleRows?: number;
  /** `--scale-relays 1,4` (default 1, 2, 4). */
  scaleRelays?: number[];
  /** `--scale-buses classic` (default both). */
  scaleBuses?: readonly ('classic' | 'custom')[];
  /** `--scale-start cold,warm`: how the backlog meets the deployment (default cold). */
  scaleStarts?: readonly ('cold' | 'warm')[];
}

/** The parameters of the run (see {@link benchParameters}). */
export type BenchParameters = ReturnType<typeof benchParameters>;
