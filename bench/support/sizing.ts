/**
 * Lambda sizing from measured figures: what one relay invocation can move at a given memory size,
 * and what a million events cost there.
 */

/**
 * The duration price used: Arm (Graviton), US East (N. Virginia), first tier (up to 7.5 billion
 * GB-seconds a month), from the AWS Lambda pricing page (aws.amazon.com/lambda/pricing), unchanged
 * since Arm functions launched in September 2021; read on the date given.
 */
export const LAMBDA_PRICE = {
  perGbSecondUsd: 0.0000133334,
  architecture: 'arm64',
  region: 'us-east-1',
  asOf: '2026-11-30',
  perMillionRequestsUsd: 0.2,
} as const;

/** Memory at which a function gets the equivalent of one vCPU (Lambda developer guide, "Memory and computing power"). */
export const ONE_VCPU_MB = 1_769;

/** The sizes the table in docs/performance.md#lambda-sizing-at-20-ms-bus-latency lists, MB. */
export const SIZING_MEMORY_MB = [128, 256, 512, 1_024, 1_769] as const;

/** One row of the sizing table. */
export interface SizingRow {
  memoryMb: number;
  /** Share of one vCPU: memory / 1,769 MB, at most 1 (the relay's JavaScript runs on one thread). */
  cpuShare: number;
  /** cpuShare × events per CPU-second, events/s. */
  cpuBound: number;
  /** PutEvents bound: concurrency × 10 entries × 1000 / latency ms, events/s. */
  putEventsBound: number;
  /** The smaller of the two, events/s. */
  projected: number;
  limitedBy: 'CPU' | 'PutEvents';
  /** Duration cost of publishing one million events at the projected rate, USD. */
  usdPerMillionEvents: number;
  /** Duration cost of one relay polling all month (the schedule keeps one invocation running), USD. */
  usdPerMonthAlwaysOn: number;
}

/**
 * Projects one invocation's throughput and cost at `memoryMb`.
 * @param eventsPerCpuSecond measured events per second of CPU time (user + system)
 * @param latencyMs PutEvents round trip, ms
 * @param publishConcurrency PutEvents calls in flight (OUTBOX_PUBLISH_CONCURRENCY)
 */
export function sizingRow(
  memoryMb: number,
  eventsPerCpuSecond: number,
  latencyMs: number,
  publishConcurrency: number,
): SizingRow {
  const cpuShare = Math.min(1, memoryMb / ONE_VCPU_MB);
  const cpuBound = cpuShare * eventsPerCpuSecond;
  const putEventsBound = (publishConcurrency * 10 * 1000) / latencyMs;
  const projected = Math.min(cpuBound, putEventsBound);
  const gb = memoryMb / 1024;
  return {
    memoryMb,
    cpuShare,
    cpuBound,
    putEventsBound,
    projected,
    limitedBy: cpuBound < putEventsBound ? 'CPU' : 'PutEvents',
    usdPerMillionEvents: (1e6 / projected) * gb * LAMBDA_PRICE.perGbSecondUsd,
    usdPerMonthAlwaysOn: 30 * 86_400 * gb * LAMBDA_PRICE.perGbSecondUsd,
  };
}

/**
 * The size the table recommends: the smallest one whose projected throughput reaches the PutEvents
 * bound (more memory buys no more events/s at the default concurrency, only a higher bill), among
 * the sizes whose measured peak RSS leaves `headroom` of the memory free.
 */
export function recommendedMemory(
  rows: readonly SizingRow[],
  peakRssMbAt: (memoryMb: number) => number | undefined,
  headroom = 0.2,
): number {
  const fits = rows.filter((r) => {
    const rss = peakRssMbAt(r.memoryMb);
    return rss === undefined || rss <= r.memoryMb * (1 - headroom);
  });
  const reaching = fits.find((r) => r.limitedBy === 'PutEvents');
  return (reaching ?? fits[fits.length - 1] ?? rows[rows.length - 1])?.memoryMb ?? 256;
}
