/**
 * Bench section `lambda-lag`: commit-to-bus lag of the relay as deployed, across invocation
 * boundaries. The relay bundle from cdk.out runs as Lambda runs it ({@link LambdaService}: warm
 * environments reused, a new one when all are busy, the context's remaining time counting down
 * from the template's timeout), invoked on the template's schedule the way EventBridge Scheduler
 * invokes it (asynchronously, a little late: see {@link schedulerDelay}), while a producer
 * commits a steady rate of events and the bus answers after a fixed latency. The lag of every
 * event is the bus's acceptance time less its commit time (first delivery).
 */
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { LambdaService } from '../../shared/local/lambda-runtime/lambda-service.ts';
import type { Sql } from '../../shared/platform/index.ts';
import { ServiceName } from '../../shared/platform/names.ts';
import {
  type BusKind,
  busEnvironment,
  percentile,
  readDemoStack,
  runSchedule,
  sampleConnections,
  schedulerDelay,
  serviceOptions,
  steadyProducer,
  templateFunction,
} from '../support/deployed.ts';
import type { BusProcess } from '../support/processes.ts';
import { load } from '../support/report.ts';

/** What a deployed-bench section needs from the bench. */
export interface DeployedBenchContext {
  /** A `cdk synth` output folder of the checkout measured. */
  cdkOut: string;
  /** Which checkout's bundle: `this checkout`, or `baseline <commit>` (`--baseline`), with its `--variant`. */
  checkout: string;
  /** Variables set on the relay function over the template's (`--variant`), to compare settings side by side. */
  relayEnvironment?: Record<string, string>;
  databaseUrl: string;
  /** The database's name (for `pg_stat_activity`). */
  database: string;
  /** A pool on the database, for setup and counting. */
  sql: Sql;
  bus: BusProcess;
  log: (line: string) => void;
  /** Prints a markdown table and keeps it for the results file. */
  report: (table: string) => void;
}

/** Knobs of the lag run. */
export interface LambdaLagOptions {
  ratePerSecond: number;
  /** The classic event bus (default) or the Custom Event Bus (100 entries per call). */
  busKind?: BusKind;
  /** Invocation boundaries the producer runs across (at least 3). */
  boundaries: number;
  busLatencyMs: number;
  /** Each scheduled invocation arrives 0–this late, ms (uniform, seeded). */
  schedulerJitterMs: number;
  /** One invocation arrives this much later still (a bad minute): `k` counts from 0. */
  lateInvocation?: { k: number; ms: number };
  /** Sandbox creation before a new environment's init, ms (the init itself is measured). */
  coldStartExtraMs: number;
  seed: number;
  /** How long the producer runs, s (default: across the boundaries and 15 s into the next period). */
  durationSeconds?: number;
  /**
   * Records when each event was first claimed (a trigger on the lease token, which costs the
   * claim a little) and splits the lag there: waiting for a claim, and from the claim to the bus.
   */
  trace?: boolean;
}

/** What the lag run measured. */
export interface LambdaLagFigures {
  checkout: string;
  bus: BusKind;
  /** How long the producer ran, s. */
  seconds: number;
  /** 1-minute load average per core at the end of the run (above 1: other work competed). */
  loadPerCore: number;
  ratePerSecond: number;
  schedule: string;
  timeoutSeconds: number;
  offered: number;
  delivered: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  overOneSecondShare: number;
  /**
   * The lag's p99 per 10 s of commit time, from the producer's start: whether the tail is one
   * stall, waves of backlog, or spread over the run.
   */
  p99By10s: number[];
  /**
   * Where the tail goes: the events committed around an invocation's start (from 1 s before it to
   * 5 s after, when a new invocation opens its pool and starts claiming, or while no invocation
   * ran) against the rest, with their lag percentiles, and the share of the events above the run's
   * p99 that fell around a start.
   */
  breakdown: {
    boundary: { events: number; p50: number; p99: number; max: number };
    steady: { events: number; p50: number; p99: number; max: number };
    tailAtBoundaryShare: number;
    /** The relay's own summaries, summed over the invocations that returned one. */
    passes: number;
    claimed: number;
    eventsPerPass: number;
    putEventsCalls: number;
    meanPutEventsMs: number;
    /** With `trace`: the lag split at the event's first claim (see {@link claimSplit}). */
    claim?: ClaimSplit;
  };
  peakRelayConnections: number;
  peakConcurrentInvocations: number;
  environments: number;
  invocations: {
    n: number;
    scheduledAtS: number;
    startedAtS: number;
    endedAtS: number;
    coldStart: boolean;
    environment: number;
    outcome: string;
  }[];
}

/** Runs the lag measurement and reports its table. */
export async function lambdaLag(ctx: DeployedBenchContext, o: LambdaLagOptions): Promise<LambdaLagFigures> {
  const stack = await readDemoStack(ctx.cdkOut);
  const relay = templateFunction(stack, '/Outbox/RelayFunction/Resource');
  const schedule = stack.schedules.find((s) => s.targetLogicalId === relay.logicalId);
  if (!schedule || !Number.isFinite(schedule.periodSeconds)) {
    throw new Error(`lambda-lag: no rate schedule invokes the relay (${schedule?.expression ?? 'none'})`);
  }
  const busKind = o.busKind ?? 'classic';
  await ctx.sql`truncate outbox.outbox, outbox.outbox_aggregate`;
  await ctx.bus.reset();
  await ctx.bus.setFaults({ latencyMs: o.busLatencyMs });
  if (o.trace) await traceClaims(ctx.sql);

  const service = new LambdaService(
    serviceOptions(
      relay,
      { databaseUrl: ctx.databaseUrl, busUrl: ctx.bus.url },
      {
        coldStartExtraMs: o.coldStartExtraMs,
        environment: { ...busEnvironment(busKind, ctx.bus.url), ...ctx.relayEnvironment },
      },
    ),
  );
  const periodMs = schedule.periodSeconds * 1000;
  const delay = schedulerDelay(o.seed, o.schedulerJitterMs, o.lateInvocation);
  const connections = sampleConnections(ctx.sql, ctx.database, ServiceName.relay);
  const errors: unknown[] = [];
  ctx.log(
    `lambda-lag (${ctx.checkout}): ${busKind} bus, ${schedule.expression}, timeout ${relay.timeoutSeconds} s, ${o.ratePerSecond} events/s ${o.durationSeconds === undefined ? `across ${o.boundaries} boundaries` : `for ${o.durationSeconds} s`}`,
  );
  const scheduler = runSchedule(service, periodMs, schedule.input, delay, (e) => errors.push(e));
  let figures: LambdaLagFigures;
  let stoppedAt = Number.POSITIVE_INFINITY;
  try {
    // The producer starts once the first invocation has had time to start (cold), and runs across
    // the boundaries, into the invocation after the last one.
    await sleep(Math.max(0, scheduler.start + 5_000 - Date.now()));
    const producer = steadyProducer(ctx.sql, o.ratePerSecond);
    const endAt =
      o.durationSeconds === undefined
        ? scheduler.start + o.boundaries * periodMs + 20_000
        : scheduler.start + 5_000 + o.durationSeconds * 1000;
    while (Date.now() < endAt) {
      if (errors.length > 0) throw errors[0];
      await sleep(1_000);
    }
    await producer.stop();
    // Whatever is still pending gets a bounded time to arrive.
    const deliverBy = Date.now() + 30_000;
    while (Date.now() < deliverBy && (await ctx.bus.stats()).accepted < producer.committedAt.size) {
      await sleep(200);
    }
    const lags: number[] = [];
    const committed: number[] = [];
    const seen = new Set<string>();
    const ids: string[] = [];
    const received: number[] = [];
    for (const e of await ctx.bus.events()) {
      const id = (e.detail as { metadata: { eventId: string } }).metadata.eventId;
      const c = producer.committedAt.get(id);
      if (c === undefined || seen.has(id)) continue;
      seen.add(id);
      lags.push(e.receivedAt - c);
      committed.push(c);
      ids.push(id);
      received.push(e.receivedAt);
    }
    const claimedAt = o.trace ? await claimTimes(ctx.sql) : undefined;
    const dump = process.env.OUTBOX_BENCH_LAG_DUMP;
    if (dump)
      writeFileSync(
        `${dump}-${ctx.checkout.replace(/\W+/g, '-')}-${busKind}-${o.ratePerSecond}.json`,
        JSON.stringify({
          start: scheduler.start,
          starts: service.starts,
          events: ids.map((id, i) => [committed[i], claimedAt?.get(id) ?? null, received[i]]),
        }),
      );
    figures = {
      checkout: ctx.checkout,
      bus: busKind,
      seconds: Math.round((endAt - scheduler.start - 5_000) / 1000),
      loadPerCore: load(),
      ratePerSecond: o.ratePerSecond,
      schedule: schedule.expression,
      timeoutSeconds: relay.timeoutSeconds,
      offered: producer.committedAt.size,
      delivered: lags.length,
      p50: percentile(lags, 50),
      p90: percentile(lags, 90),
      p99: percentile(lags, 99),
      max: percentile(lags, 100),
      overOneSecondShare: lags.filter((l) => l > 1_000).length / Math.max(1, lags.length),
      p99By10s: p99ByWindow(lags, committed, scheduler.start + 5_000, 10_000),
      breakdown: {
        ...lagBreakdown(lags, committed, service.records, service.starts),
        ...(claimedAt ? { claim: claimSplit(lags, committed, received, ids, claimedAt) } : {}),
      },
      peakRelayConnections: connections.peak(),
      peakConcurrentInvocations: service.peakConcurrency,
      environments: service.environmentsCreated,
      invocations: [],
    };
  } finally {
    stoppedAt = Date.now();
    scheduler.stop();
    await connections.stop();
    if (o.trace) await untraceClaims(ctx.sql);
    // The invocations still running are not waited for (up to a timeout each): Lambda would
    // freeze them; here their processes are ended.
    await service.stop({ wait: false });
  }
  const s = (t: number) => Number(((t - scheduler.start) / 1000).toFixed(1));
  figures.invocations = service.records.map((r) => ({
    n: r.n,
    scheduledAtS: s(scheduler.start + (r.n - 1) * periodMs),
    startedAtS: s(r.startedAt),
    endedAtS: s(r.endedAt),
    coldStart: r.coldStart,
    environment: r.environment,
    // Still running when the run ended (its process was ended then), or how it ended.
    outcome: r.endedAt >= stoppedAt && r.outcome.type !== 'result' ? 'running at the end' : r.outcome.type,
  }));
  const f = figures;
  ctx.report(
    `### Commit-to-bus lag as deployed (${ctx.checkout}): the relay bundle on its schedule, ${busKind === 'classic' ? 'classic event bus' : 'Custom Event Bus (100 entries per call)'}, ${o.ratePerSecond} events/s, ${o.busLatencyMs} ms bus latency, ${o.durationSeconds === undefined ? `${o.boundaries} invocation boundaries` : `${o.durationSeconds} s`}

| schedule, timeout | offered | delivered | p50 | p90 | p99 | max | over 1 s | peak relay connections | peak invocations at once |
|---|---|---|---|---|---|---|---|---|---|
| \`${f.schedule}\`, ${f.timeoutSeconds} s | ${f.offered} | ${f.delivered} | ${f.p50} ms | ${f.p90} ms | ${f.p99} ms | ${f.max} ms | ${(f.overOneSecondShare * 100).toFixed(1)} % | ${f.peakRelayConnections} | ${f.peakConcurrentInvocations} |

Where the lag goes: events committed from 1 s before an invocation's start to 5 s after it (or while none ran): ${f.breakdown.boundary.events}, p50 ${f.breakdown.boundary.p50} ms, p99 ${f.breakdown.boundary.p99} ms, max ${f.breakdown.boundary.max} ms; the rest: ${f.breakdown.steady.events}, p50 ${f.breakdown.steady.p50} ms, p99 ${f.breakdown.steady.p99} ms, max ${f.breakdown.steady.max} ms; of the events above the p99, ${(f.breakdown.tailAtBoundaryShare * 100).toFixed(0)} % were committed around a start. The relay's summaries: ${f.breakdown.passes} passes, ${f.breakdown.eventsPerPass} events per pass, ${f.breakdown.putEventsCalls} PutEvents calls of ${f.breakdown.meanPutEventsMs} ms on average.${claimSplitText(f.breakdown.claim)} The p99 in each 10 s from the producer's start: ${f.p99By10s.join(', ')} ms.

Invocations (s from the schedule's start; scheduled every ${periodMs / 1000} s, each 0–${o.schedulerJitterMs / 1000} s late${o.lateInvocation ? `, invocation ${o.lateInvocation.k + 1} a further ${o.lateInvocation.ms / 1000} s` : ''}; a new environment waits ${o.coldStartExtraMs} ms for its sandbox, then really starts and imports the bundle): ${f.invocations
      .map(
        (i) =>
          `#${i.n} env ${i.environment}${i.coldStart ? ' (cold)' : ''} ${i.startedAtS}–${i.outcome === 'result' ? i.endedAtS : `${i.endedAtS} (${i.outcome})`}`,
      )
      .join(
        ', ',
      )}. The bundle is the one \`cdk synth\` wrote, with the template's environment, memory and timeout; RDS Proxy and IAM are not here (a direct connection, the pooler settings kept). Connections: \`pg_stat_activity\` rows of the relay's application name, sampled every 100 ms.`,
  );
  return figures;
}

/** The lag's p99 in each `windowMs` of commit time from `from`. */
function p99ByWindow(
  lags: readonly number[],
  committed: readonly number[],
  from: number,
  windowMs: number,
): number[] {
  const windows: number[][] = [];
  lags.forEach((lag, i) => {
    const w = Math.max(0, Math.floor(((committed[i] as number) - from) / windowMs));
    const xs = windows[w] ?? [];
    xs.push(lag);
    windows[w] = xs;
  });
  return Array.from(windows, (xs) => percentile(xs ?? [], 99));
}

/** The lag split by where an event was committed (see {@link LambdaLagFigures.breakdown}). */
function lagBreakdown(
  lags: readonly number[],
  committed: readonly number[],
  records: readonly { startedAt: number; endedAt: number; outcome: { type: string; result?: unknown } }[],
  starts: readonly number[],
): LambdaLagFigures['breakdown'] {
  // Invocations still running at the end have a start but no record yet.
  const running = starts.filter((t) => !records.some((r) => r.startedAt === t));
  const aroundStart = (c: number) =>
    starts.some((t) => c >= t - 1_000 && c <= t + 5_000) ||
    !(records.some((r) => c >= r.startedAt && c <= r.endedAt) || running.some((t) => c >= t));
  const boundary: number[] = [];
  const steady: number[] = [];
  const p99 = percentile(lags, 99);
  let tail = 0;
  let tailAtBoundary = 0;
  lags.forEach((lag, i) => {
    const at = aroundStart(committed[i] as number);
    (at ? boundary : steady).push(lag);
    if (lag > p99) {
      tail++;
      if (at) tailAtBoundary++;
    }
  });
  const figures = (xs: number[]) => ({
    events: xs.length,
    p50: percentile(xs, 50),
    p99: percentile(xs, 99),
    max: percentile(xs, 100),
  });
  const sum = { passes: 0, claimed: 0, putEventsCalls: 0, putEventsMs: 0 };
  for (const r of records) {
    if (r.outcome.type !== 'result') continue;
    const x = r.outcome.result as Partial<typeof sum> | undefined;
    for (const k of Object.keys(sum) as (keyof typeof sum)[]) sum[k] += Number(x?.[k] ?? 0);
  }
  return {
    boundary: figures(boundary),
    steady: figures(steady),
    tailAtBoundaryShare: tail === 0 ? 0 : tailAtBoundary / tail,
    passes: sum.passes,
    claimed: sum.claimed,
    eventsPerPass: Number((sum.claimed / Math.max(1, sum.passes)).toFixed(1)),
    putEventsCalls: sum.putEventsCalls,
    meanPutEventsMs: Math.round(sum.putEventsMs / Math.max(1, sum.putEventsCalls)),
  };
}

/**
 * The lag split at each event's first claim (`trace`): commit → claim is the wait for a lane to
 * claim it (the poll, the lanes busy with earlier passes, the claim statement itself, an
 * invocation boundary); claim → bus is its pass's rounds, the wait for a PutEvents slot and the call.
 */
export interface ClaimSplit {
  /** Events whose claim was recorded. */
  events: number;
  all: { commitToClaimP50: number; commitToClaimP99: number; claimToBusP50: number; claimToBusP99: number };
  /** The events above the run's p99: their medians, and the share of them that waited longest for the claim. */
  tail: { events: number; commitToClaimP50: number; claimToBusP50: number; claimWaitLongerShare: number };
}

/** Records, per outbox row, when a lease token was first set on it (bench only: a trigger). */
async function traceClaims(sql: Sql): Promise<void> {
  await sql`create table if not exists public.bench_claim (id int8 primary key, claimed_at timestamptz not null)`;
  await sql`truncate public.bench_claim`;
  await sql.unsafe(`
    create or replace function public.bench_record_claim() returns trigger language plpgsql as $$
    begin
      insert into public.bench_claim values (new.id, pg_catalog.clock_timestamp()) on conflict do nothing;
      return null;
    end $$`);
  await sql.unsafe(`
    create or replace trigger bench_claim after update of lease_token on outbox.outbox for each row
    when (new.lease_token is not null and new.lease_token is distinct from old.lease_token)
    execute function public.bench_record_claim()`);
}

async function untraceClaims(sql: Sql): Promise<void> {
  await sql`drop trigger if exists bench_claim on outbox.outbox`;
}

/** Each event's first claim, ms since the epoch, by event id. */
async function claimTimes(sql: Sql): Promise<Map<string, number>> {
  const rows = await sql<{ event_id: string; at: number }[]>`
    select o.event_id::text, (extract(epoch from c.claimed_at) * 1000)::float8 as at
    from outbox.outbox o join public.bench_claim c using (id)`;
  return new Map(rows.map((r) => [r.event_id, Number(r.at)]));
}

function claimSplit(
  lags: readonly number[],
  committed: readonly number[],
  received: readonly number[],
  ids: readonly string[],
  claimedAt: Map<string, number>,
): ClaimSplit {
  const p99 = percentile(lags, 99);
  const wait: number[] = [];
  const send: number[] = [];
  const tailWait: number[] = [];
  const tailSend: number[] = [];
  let longer = 0;
  ids.forEach((id, i) => {
    const at = claimedAt.get(id);
    if (at === undefined) return;
    const w = at - (committed[i] as number);
    const b = (received[i] as number) - at;
    wait.push(w);
    send.push(b);
    if ((lags[i] as number) > p99) {
      tailWait.push(w);
      tailSend.push(b);
      if (w > b) longer++;
    }
  });
  const r = (x: number) => Math.round(x);
  return {
    events: wait.length,
    all: {
      commitToClaimP50: r(percentile(wait, 50)),
      commitToClaimP99: r(percentile(wait, 99)),
      claimToBusP50: r(percentile(send, 50)),
      claimToBusP99: r(percentile(send, 99)),
    },
    tail: {
      events: tailWait.length,
      commitToClaimP50: r(percentile(tailWait, 50)),
      claimToBusP50: r(percentile(tailSend, 50)),
      claimWaitLongerShare: tailWait.length === 0 ? 0 : longer / tailWait.length,
    },
  };
}

function claimSplitText(c: ClaimSplit | undefined): string {
  if (!c) return '';
  return ` Split at each event's first claim (${c.events} events): commit → claim p50 ${c.all.commitToClaimP50} ms, p99 ${c.all.commitToClaimP99} ms; claim → bus p50 ${c.all.claimToBusP50} ms, p99 ${c.all.claimToBusP99} ms; the ${c.tail.events} events above the p99: commit → claim ${c.tail.commitToClaimP50} ms, claim → bus ${c.tail.claimToBusP50} ms (medians), ${(c.tail.claimWaitLongerShare * 100).toFixed(0)} % of them waited longer for their claim than from it to the bus.`;
}

/** The lag runs side by side: one row per checkout, bus and rate. */
export function lambdaLagSummary(runs: readonly LambdaLagFigures[]): string {
  const n = (x: number) => x.toLocaleString('en');
  return `### Commit-to-bus lag as deployed, side by side

| checkout | bus | events/s | for | offered | on the bus | p50 | p90 | p99 | max | p99 around a start | p99 the rest | load per core |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
${runs
  .map(
    (f) =>
      `| ${f.checkout} | ${f.bus === 'classic' ? 'classic' : 'Custom Event Bus'} | ${n(f.ratePerSecond)} | ${f.seconds} s | ${n(f.offered)} | ${n(f.delivered)}${f.delivered < f.offered ? ' (**missing**)' : ''} | ${f.p50} ms | ${f.p90} ms | ${f.p99} ms | ${f.max} ms | ${f.breakdown.boundary.p99} ms | ${f.breakdown.steady.p99} ms | ${f.loadPerCore} |`,
  )
  .join('\n')}

"Around a start": events committed from 1 s before an invocation's start to 5 s after it, or while none ran. Load: the 1-minute load average per core at the end of the run.`;
}
