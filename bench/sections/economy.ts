/**
 * Bench section `economy`: the relay as deployed at a low event rate, in steady mode (every
 * invocation polls until close to its timeout) and in economy mode (`OUTBOX_IDLE_RETURN_SECONDS`:
 * an invocation returns after that many seconds without a claim). For each mode: the
 * commit-to-bus lag of every event, and the Lambda time the invocations were billed for, turned
 * into a monthly cost at the schedule's rate. The relay bundle from cdk.out runs as Lambda runs it
 * and is invoked on the template's schedule as in `lambda-lag` (see there); the producer commits
 * events at random times (exponential gaps, seeded), as a quiet service would.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { LambdaService } from '../../shared/local/lambda-runtime/lambda-service.ts';
import type { Sql } from '../../shared/platform/index.ts';
import { EnvVar } from '../../shared/platform/names.ts';
import { enqueue } from '../../shared/producer/index.ts';
import {
  percentile,
  readDemoStack,
  runSchedule,
  schedulerDelay,
  seeded,
  serviceOptions,
  templateFunction,
} from '../support/deployed.ts';
import type { DeployedBenchContext } from './lambda-lag.ts';

/** Knobs of the economy run. */
export interface EconomyOptions {
  /** Mean time between two events, ms (exponential gaps); 0: no events at all (a quiet outbox). */
  meanGapMs: number;
  /** The modes to run (default both). */
  modes?: ('steady' | 'economy')[];
  /** Schedule periods each mode runs for. */
  periods: number;
  busLatencyMs: number;
  /** Each scheduled invocation arrives 0–this late, ms. */
  schedulerJitterMs: number;
  coldStartExtraMs: number;
  /** The quiet period of economy mode, s (the construct's `relayMode: 'economy'` sets 10). */
  idleReturnSeconds: number;
  seed: number;
}

/** What one mode measured. */
export interface ModeFigures {
  mode: 'steady' | 'economy';
  offered: number;
  delivered: number;
  p50: number;
  p90: number;
  max: number;
  /** Completed invocations and their mean billed duration (the handler's), s. */
  invocations: number;
  meanBilledSeconds: number;
  stopReasons: Record<string, number>;
  /** At the schedule's rate all month (30 days), at the template's memory, Arm price. */
  monthlyGbSeconds: number;
  monthlyUsd: number;
}

/** Lambda on Arm, US East (N. Virginia), first tier, per GB-second (AWS Lambda pricing, 2026-11-30). */
const USD_PER_GB_SECOND = 0.0000133334;
/** Per request. */
const USD_PER_REQUEST = 0.2 / 1_000_000;

/** Runs both modes, one after the other, and reports their table. */
export async function economy(
  ctx: DeployedBenchContext,
  o: EconomyOptions,
): Promise<Partial<Record<'steady' | 'economy', ModeFigures>>> {
  const stack = await readDemoStack(ctx.cdkOut);
  const relay = templateFunction(stack, '/Outbox/RelayFunction/Resource');
  const schedule = stack.schedules.find((s) => s.targetLogicalId === relay.logicalId);
  if (!schedule || !Number.isFinite(schedule.periodSeconds)) {
    throw new Error(`economy: no rate schedule invokes the relay (${schedule?.expression ?? 'none'})`);
  }
  const periodMs = schedule.periodSeconds * 1000;
  const rateWords = o.meanGapMs > 0 ? `one event every ${o.meanGapMs / 1000} s on average` : 'no events';
  const invocationsPerMonth = (30 * 86_400) / schedule.periodSeconds;
  const run = async (mode: 'steady' | 'economy'): Promise<ModeFigures> => {
    await ctx.sql`truncate outbox.outbox, outbox.outbox_aggregate`;
    await ctx.bus.reset();
    await ctx.bus.setFaults({ latencyMs: o.busLatencyMs });
    const service = new LambdaService(
      serviceOptions(
        relay,
        { databaseUrl: ctx.databaseUrl, busUrl: ctx.bus.url },
        {
          coldStartExtraMs: o.coldStartExtraMs,
          environment: mode === 'economy' ? { [EnvVar.idleReturnSeconds]: String(o.idleReturnSeconds) } : {},
        },
      ),
    );
    ctx.log(`economy: ${mode}, ${schedule.expression}, ${rateWords}`);
    const errors: unknown[] = [];
    const scheduler = runSchedule(
      service,
      periodMs,
      schedule.input,
      schedulerDelay(o.seed, o.schedulerJitterMs),
      (e) => errors.push(e),
    );
    let committedAt: Map<string, number>;
    try {
      await sleep(Math.max(0, scheduler.start + 5_000 - Date.now()));
      const producer = o.meanGapMs > 0 ? randomProducer(ctx.sql, o.meanGapMs, o.seed) : noProducer();
      const endAt = scheduler.start + o.periods * periodMs;
      while (Date.now() < endAt) {
        if (errors.length > 0) throw errors[0];
        await sleep(1_000);
      }
      committedAt = await producer.stop();
      // An event committed after an economy relay returned waits for the next invocation.
      const deliverBy = Date.now() + periodMs + 30_000;
      while (Date.now() < deliverBy && (await ctx.bus.stats()).accepted < committedAt.size) await sleep(200);
    } finally {
      scheduler.stop();
      await service.stop({ wait: false });
    }
    const lags: number[] = [];
    for (const e of await ctx.bus.events()) {
      const c = committedAt.get((e.detail as { metadata: { eventId: string } }).metadata.eventId);
      if (c !== undefined) lags.push(e.receivedAt - c);
    }
    const done = service.records.filter((r) => r.outcome.type === 'result');
    const meanBilledSeconds =
      done.reduce((sum, r) => sum + r.outcome.durationMs, 0) / Math.max(1, done.length) / 1000;
    const stopReasons: Record<string, number> = {};
    for (const r of done) {
      const reason = String((r.outcome.result as { stopReason?: string } | undefined)?.stopReason);
      stopReasons[reason] = (stopReasons[reason] ?? 0) + 1;
    }
    const monthlyGbSeconds = meanBilledSeconds * invocationsPerMonth * (relay.memoryMb / 1024);
    return {
      mode,
      offered: committedAt.size,
      delivered: lags.length,
      p50: percentile(lags, 50),
      p90: percentile(lags, 90),
      max: percentile(lags, 100),
      invocations: done.length,
      meanBilledSeconds: Number(meanBilledSeconds.toFixed(2)),
      stopReasons,
      monthlyGbSeconds: Math.round(monthlyGbSeconds),
      monthlyUsd: Number(
        (monthlyGbSeconds * USD_PER_GB_SECOND + invocationsPerMonth * USD_PER_REQUEST).toFixed(2),
      ),
    };
  };
  const figures: Partial<Record<'steady' | 'economy', ModeFigures>> = {};
  for (const mode of o.modes ?? ['steady', 'economy']) figures[mode] = await run(mode);
  const row = (f: ModeFigures) =>
    `| ${f.mode}${f.mode === 'economy' ? ` (\`OUTBOX_IDLE_RETURN_SECONDS=${o.idleReturnSeconds}\`)` : ''} | ${f.offered} | ${f.delivered} | ${f.p50} ms | ${f.p90} ms | ${f.max} ms | ${f.invocations} (${Object.entries(
      f.stopReasons,
    )
      .map(([k, v]) => `${v} ${k}`)
      .join(
        ', ',
      )}) | ${f.meanBilledSeconds} s | ${f.monthlyGbSeconds.toLocaleString('en-US')} | $${f.monthlyUsd} |`;
  ctx.report(
    `### Economy and steady mode at a low rate: ${rateWords}, \`${schedule.expression}\`, ${relay.memoryMb} MB, timeout ${relay.timeoutSeconds} s

| mode | offered | delivered | p50 | p90 | max | invocations completed (stop reason) | billed per invocation | GB-s a month | relay a month |
|---|---|---|---|---|---|---|---|---|---|
${Object.values(figures).map(row).join('\n')}

Each mode ran ${o.periods} schedule periods with the relay bundle from \`cdk synth\` invoked on its schedule (0–${o.schedulerJitterMs / 1000} s late; ${o.coldStartExtraMs} ms of sandbox before a new environment's init), the bus answering in ${o.busLatencyMs} ms. Billed time is the handler's duration of the completed invocations (a new environment's init, once, is not counted); a month is 30 days of the schedule at $${USD_PER_GB_SECOND} per GB-second (Arm, us-east-1) plus $0.20 per million requests.`,
  );
  return figures;
}

/** A producer that commits nothing: the quiet outbox. */
function noProducer(): { stop: () => Promise<Map<string, number>> } {
  return { stop: async () => new Map() };
}

/**
 * Commits one event at a time at random moments: exponential gaps of mean `meanGapMs` (seeded).
 * `stop` resolves with each event's id and `Date.now()` just after its commit returned.
 */
function randomProducer(
  sql: Sql,
  meanGapMs: number,
  seed: number,
): { stop: () => Promise<Map<string, number>> } {
  const random = seeded(seed + 1);
  const committedAt = new Map<string, number>();
  const abort = new AbortController();
  const loop = (async () => {
    for (let n = 1; !abort.signal.aborted; n++) {
      const gap = -Math.log(1 - random()) * meanGapMs;
      await sleep(gap, undefined, { signal: abort.signal }).catch(() => {});
      if (abort.signal.aborted) return;
      const r = await sql.begin((tx) =>
        enqueue(tx, {
          type: 'OrderPlaced',
          source: 'bench.orders',
          aggregateType: 'order',
          aggregateId: String(n),
          payload: { n },
        }),
      );
      committedAt.set(r.eventId, Date.now());
    }
  })();
  return {
    stop: async () => {
      abort.abort();
      await loop;
      return committedAt;
    },
  };
}
