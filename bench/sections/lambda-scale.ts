/**
 * Bench section `lambda-scale`: draining a backlog with 1, 2 and 4 relays, as deployed. The relay
 * and monitor bundles from cdk.out run as Lambda runs them ({@link LambdaService}); the relay's
 * schedule and the monitor's fire together, every period, until the backlog is drained (a drain
 * longer than a period meets the next scheduled relay, as deployed); the monitor measures the
 * backlog and starts the
 * extra relays through the real Lambda client, against a local Invoke endpoint that hands each
 * asynchronous invocation to the relay's environments (a new one, cold, when all are busy).
 * `maxRelays` is set through the monitor's OUTBOX_MAX_RELAYS, with OUTBOX_BACKLOG_PER_RELAY 1 so
 * that the backlog asks for all of them. Each drain's CPU is read from /proc (the relay processes,
 * this database's Postgres backends, the bus) with the machine's idle share: whether the relays
 * or the machine's cores are the ceiling. Two starts: `cold`, nothing running when the backlog is
 * there and both schedules fire; `warm`, the backlog lands on a running deployment (the scheduled
 * relay polling an empty outbox, the monitor's environment warm from its last firing, which comes
 * next), so only the extra relays start cold.
 */
import { cpus } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { startLocalLambda } from '../../shared/local/lambda.ts';
import { LambdaService } from '../../shared/local/lambda-runtime/lambda-service.ts';
import { ServiceName } from '../../shared/platform/names.ts';
import {
  type BusKind,
  busEnvironment,
  machineCpu,
  readDemoStack,
  runSchedule,
  sampleConnections,
  sampleCpu,
  serviceOptions,
  templateFunction,
} from '../support/deployed.ts';
import type { DeployedBenchContext } from './lambda-lag.ts';

/** Knobs of the scale-out run. */
export interface LambdaScaleOptions {
  rows: number;
  relays: number[];
  /** The buses drained to, each with every relay count: the classic bus and the Custom Event Bus. */
  busKinds: BusKind[];
  /** How the backlog meets the deployment: `cold` (nothing running) and `warm` (see the module's doc). */
  starts: Start[];
  busLatencyMs: number;
  /** Sandbox creation before a new environment's init, ms. */
  coldStartExtraMs: number;
  /** Give up on a drain after this long, ms. */
  drainTimeoutMs: number;
}

/** `cold`: nothing running when both schedules fire; `warm`: the backlog lands on a running deployment. */
export type Start = 'cold' | 'warm';

/** One drain. */
export interface LambdaScaleRow {
  /** Which checkout's bundle (`--baseline`: another one's beside this one's). */
  checkout: string;
  bus: BusKind;
  start: Start;
  relays: number;
  drainSeconds: number;
  eventsPerSecond: number;
  relayInvocations: number;
  peakRelaysAtOnce: number;
  extraRelaysStarted: number;
  peakConnections: number;
  coldStarts: number;
  /**
   * CPU per event, µs, during the drain: the relay processes' (cold starts included), this
   * database's Postgres backends', the bus's; and the machine's idle share (all cores, 0–1).
   */
  relayCpuUsPerEvent: number;
  postgresCpuUsPerEvent: number;
  busCpuUsPerEvent: number;
  idleShare: number;
  /** Cores the drain's own processes kept busy on average (relays, Postgres, bus), and the machine's busy cores (anyone's). */
  drainCores: number;
  busyCores: number;
  /**
   * Events/s from the first moment `relays` handlers ran at once (every cold start's sandbox and
   * init, and the monitor's first invocation, behind) to the end of the drain, or null when that
   * many never ran at once.
   */
  allRunningEventsPerSecond: number | null;
  /** The ramp: seconds from the schedules' firing to that moment, or null with the rate. */
  allRunningAfterSeconds: number | null;
  /** The machine's idle share (all cores, 0–1) over the same span, or null with the rate. */
  allRunningIdleShare: number | null;
}

/** Runs the drains and reports their table. */
export async function lambdaScale(
  contexts: DeployedBenchContext[],
  o: LambdaScaleOptions,
): Promise<LambdaScaleRow[]> {
  const rows: LambdaScaleRow[] = [];
  // Each checkout's drain right after the other's: both meet the same machine.
  for (const busKind of o.busKinds)
    for (const start of o.starts)
      for (const k of o.relays) for (const ctx of contexts) rows.push(await drain(ctx, o, busKind, start, k));
  report(contexts[0] as DeployedBenchContext, o, rows);
  return rows;
}

async function drain(
  ctx: DeployedBenchContext,
  o: LambdaScaleOptions,
  busKind: BusKind,
  start: Start,
  k: number,
): Promise<LambdaScaleRow> {
  const stack = await readDemoStack(ctx.cdkOut);
  const relay = templateFunction(stack, '/Outbox/RelayFunction/Resource');
  const monitor = templateFunction(stack, '/Outbox/MonitorFunction/Resource');
  const relayName = monitor.environment.OUTBOX_RELAY_FUNCTION_NAME;
  if (!relayName) throw new Error('lambda-scale: the template gives the monitor no relay function to invoke');
  const scheduleOf = (logicalId: string) => {
    const x = stack.schedules.find((y) => y.targetLogicalId === logicalId);
    if (!x || !Number.isFinite(x.periodSeconds))
      throw new Error(`lambda-scale: no rate schedule for ${logicalId}`);
    return x;
  };
  const relayPeriodMs = scheduleOf(relay.logicalId).periodSeconds * 1000;
  const relayInput = scheduleOf(relay.logicalId).input;
  const monitorPeriodMs = scheduleOf(monitor.logicalId).periodSeconds * 1000;
  const monitorInput = scheduleOf(monitor.logicalId).input;
  await ctx.sql`truncate outbox.outbox, outbox.outbox_aggregate`;
  const land = (sql: typeof ctx.sql) => sql`
      insert into outbox.outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
      select 'order', g::text, 1, 'OrderPlaced', 'bench.orders', jsonb_build_object('orderId', g, 'total', g * 3)
      from generate_series(1, ${o.rows}) g`;
  if (start === 'cold') {
    await land(ctx.sql);
    await ctx.sql`vacuum analyze outbox`;
  }
  await ctx.bus.reset();
  await ctx.bus.setFaults({ latencyMs: o.busLatencyMs });

  const relays = new LambdaService(
    serviceOptions(
      relay,
      { databaseUrl: ctx.databaseUrl, busUrl: ctx.bus.url },
      {
        coldStartExtraMs: o.coldStartExtraMs,
        environment: { ...busEnvironment(busKind, ctx.bus.url), ...ctx.relayEnvironment },
      },
    ),
  );
  const errors: unknown[] = [];
  const onError = (e: unknown) => errors.push(e);
  const lambda = await startLocalLambda({
    onInvoke: (i) => {
      if (i.functionName !== relayName) errors.push(new Error(`invoked ${i.functionName}`));
      else relays.invoke(i.payload).catch((e: unknown) => errors.push(e));
    },
  });
  const monitors = new LambdaService(
    serviceOptions(
      monitor,
      { databaseUrl: ctx.databaseUrl, busUrl: ctx.bus.url, lambdaUrl: lambda.url },
      {
        coldStartExtraMs: o.coldStartExtraMs,
        environment: { OUTBOX_MAX_RELAYS: String(k), OUTBOX_BACKLOG_PER_RELAY: '1' },
      },
    ),
  );
  ctx.log(
    `lambda-scale (${ctx.checkout}): ${busKind} bus, ${o.rows} events, ${start}, up to ${k} relay(s), ${o.busLatencyMs} ms bus`,
  );
  // Warm: the scheduled relay polls an empty outbox and the monitor has run once (its heartbeat
  // published) before the backlog lands, in one transaction, just before the monitor's next firing.
  const warmAt =
    start === 'warm'
      ? await warmUp().catch(async (e: unknown) => {
          await relays.stop({ wait: false });
          await monitors.stop({ wait: false });
          await lambda.close();
          throw e;
        })
      : undefined;
  const connections = sampleConnections(ctx.sql, ctx.database, ServiceName.relay);
  const cpu = sampleCpu(
    ctx.sql,
    ctx.database,
    () => relays.pids,
    () => ctx.bus.cpuMs(),
  );
  let cpuStopped = false;
  const started = Date.now();
  let drainedAt: number | undefined;
  // When k relays first ran at once, and how many events the bus held then: the rate after it is
  // what k relays drain together, without the ramp (the monitor's invocation, the cold starts).
  let allRunning: { at: number; accepted: number; machine: { idle: number; total: number } } | undefined;
  // Both schedules fire at the same moments, on time (Scheduler invokes asynchronously); the
  // drain may outlast a period, and then the next invocations join as they would deployed.
  // Warm, the relay's next firing is a period after the one already polling.
  const relayDelay = warmAt === undefined ? 0 : Math.max(0, warmAt + relayPeriodMs - started);
  const relaySchedule = runSchedule(relays, relayPeriodMs, relayInput, () => relayDelay, onError);
  const monitorSchedule = runSchedule(monitors, monitorPeriodMs, monitorInput, () => 0, onError);
  try {
    while (Date.now() - started < o.drainTimeoutMs) {
      if (errors.length > 0) throw errors[0];
      const { accepted } = await ctx.bus.stats();
      if (accepted >= o.rows) {
        drainedAt = Date.now();
        break;
      }
      // Handlers, not invocations: an invocation waiting for its new environment's sandbox and
      // init claims nothing yet.
      if (!allRunning && relays.handlersRunning >= k)
        allRunning = { at: Date.now(), accepted, machine: machineCpu() };
      await sleep(100);
    }
    if (drainedAt === undefined) throw new Error(`lambda-scale: not drained within ${o.drainTimeoutMs} ms`);
    const machineAtEnd = machineCpu();
    cpuStopped = true;
    const used = await cpu.stop();
    relaySchedule.stop();
    monitorSchedule.stop();
    // The monitor's invocations take seconds; their summaries say how many extras they started.
    while (monitors.running > 0) await sleep(100);
    const failed = monitors.records.find((r) => r.outcome.type !== 'result');
    if (failed) throw new Error(`lambda-scale: a monitor invocation failed: ${failed.outcome.error}`);
    const extras = monitors.records.reduce(
      (n, r) =>
        n + ((r.outcome.result as { scaleOut?: { started: number } } | undefined)?.scaleOut?.started ?? 0),
      0,
    );
    const seconds = (drainedAt - started) / 1000;
    const perEvent = (ms: number) => Math.round((ms * 1000) / o.rows);
    // The span once all ran, when it lasted a second or more (a shorter one gives no rate).
    const all = allRunning && drainedAt - allRunning.at >= 1000 ? allRunning : undefined;
    return {
      checkout: ctx.checkout,
      bus: busKind,
      start,
      relays: k,
      drainSeconds: Number(seconds.toFixed(1)),
      eventsPerSecond: Math.round(o.rows / seconds),
      relayInvocations: relays.records.length + relays.running,
      peakRelaysAtOnce: relays.peakConcurrency,
      extraRelaysStarted: extras,
      peakConnections: connections.peak(),
      coldStarts: relays.environmentsCreated,
      relayCpuUsPerEvent: perEvent(used.functionMs),
      postgresCpuUsPerEvent: perEvent(used.postgresMs),
      busCpuUsPerEvent: perEvent(used.busMs),
      idleShare: Number(used.idleShare.toFixed(2)),
      drainCores: Number(((used.functionMs + used.postgresMs + used.busMs) / 1000 / seconds).toFixed(2)),
      busyCores: Number(used.busyCores.toFixed(2)),
      allRunningEventsPerSecond: all
        ? Math.round(((o.rows - all.accepted) * 1000) / (drainedAt - all.at))
        : null,
      allRunningAfterSeconds: all ? Number(((all.at - started) / 1000).toFixed(1)) : null,
      allRunningIdleShare: all
        ? Number(
            (
              (machineAtEnd.idle - all.machine.idle) /
              Math.max(1, machineAtEnd.total - all.machine.total)
            ).toFixed(2),
          )
        : null,
    };
  } finally {
    if (!cpuStopped) await cpu.stop().catch(() => {});
    relaySchedule.stop();
    monitorSchedule.stop();
    await connections.stop();
    await relays.stop({ wait: false });
    await monitors.stop({ wait: false });
    await lambda.close();
  }

  /** Starts the scheduled relay and runs the monitor once on the empty outbox, then lands the backlog; returns when the relay was invoked. */
  async function warmUp(): Promise<number> {
    const at = Date.now();
    relays.invoke(relayInput).catch(onError);
    const first = await monitors.invoke(monitorInput);
    if (first.outcome.type !== 'result')
      throw new Error(`lambda-scale: the monitor's warm-up invocation failed: ${first.outcome.error}`);
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (errors.length > 0) throw errors[0];
      const [left] = await ctx.sql<{ n: number }[]>`
          select count(*)::int as n from outbox.outbox where published_at is null`;
      if (relays.handlersRunning >= 1 && left?.n === 0) break;
      if (Date.now() > deadline)
        throw new Error('lambda-scale: the warm relay did not start or publish the heartbeat within 30 s');
      await sleep(100);
    }
    await ctx.bus.reset();
    await ctx.sql.begin(async (tx) => {
      await land(tx as unknown as typeof ctx.sql);
      await tx`analyze outbox.outbox`;
    });
    return at;
  }
}

/** The drains' table. */
function report(ctx: DeployedBenchContext, o: LambdaScaleOptions, rows: LambdaScaleRow[]): void {
  // Against the first row of the same bus, checkout and start (the fewest relays).
  const first = (r: LambdaScaleRow) =>
    rows.find((x) => x.bus === r.bus && x.checkout === r.checkout && x.start === r.start);
  const single = (r: LambdaScaleRow) => first(r)?.eventsPerSecond ?? 1;
  const singleAllRunning = (r: LambdaScaleRow) => first(r)?.allRunningEventsPerSecond ?? null;
  const allRunning = (r: LambdaScaleRow) => {
    const one = singleAllRunning(r);
    return r.allRunningEventsPerSecond === null || one === null
      ? 'n/a'
      : `${r.allRunningEventsPerSecond} (${(r.allRunningEventsPerSecond / one).toFixed(2)}×; ${Math.round((r.allRunningIdleShare ?? 0) * 100)} % idle; from ${r.allRunningAfterSeconds} s)`;
  };
  const checkouts = new Set(rows.map((r) => r.checkout)).size > 1;
  const starts = new Set(rows.map((r) => r.start)).size > 1;
  ctx.report(
    `### Draining a ${o.rows.toLocaleString('en')}-event backlog as deployed, ${o.busLatencyMs} ms bus latency: the scheduled relay and the extra relays the monitor starts

| ${checkouts ? 'checkout | ' : ''}bus | ${starts ? 'start | ' : ''}relays (maxRelays) | drained in | events/s | speed-up | events/s once all ran (speed-up; machine idle meanwhile; from) | relays at once (peak) | extra relays the monitor started | relay connections (peak) | relay CPU per event | Postgres CPU per event | bus CPU per event | cores busy: the drain's / the machine's | machine idle |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|${checkouts ? '---|' : ''}${starts ? '---|' : ''}
${rows
  .map(
    (r) =>
      `| ${checkouts ? `${r.checkout} | ` : ''}${r.bus === 'classic' ? 'classic' : 'Custom Event Bus'} | ${starts ? `${r.start} | ` : ''}${r.relays} | ${r.drainSeconds} s | ${r.eventsPerSecond} | ${(r.eventsPerSecond / single(r)).toFixed(2)}× | ${allRunning(r)} | ${r.peakRelaysAtOnce} | ${r.extraRelaysStarted} | ${r.peakConnections} | ${r.relayCpuUsPerEvent} µs | ${r.postgresCpuUsPerEvent} µs | ${r.busCpuUsPerEvent} µs | ${r.drainCores} / ${r.busyCores} | ${Math.round(r.idleShare * 100)} % |`,
  )
  .join('\n')}

The relay and monitor bundles from \`cdk synth\`, with the template's environment, memory and timeout. Start \`cold\`: the backlog is there and nothing runs when both schedules fire together; \`warm\`: it lands (one transaction) while the scheduled relay polls the empty outbox and just before the monitor's next firing, its environment warm from the one before, so only the extra relays start cold. Both schedules fire on time, every period until the drain is over, and the monitor (OUTBOX_MAX_RELAYS set to the row's figure, OUTBOX_BACKLOG_PER_RELAY 1) starts the extra relays through \`@aws-sdk/client-lambda\` against a local Invoke endpoint; an invocation that finds no idle environment starts a new one (a cold start: ${o.coldStartExtraMs} ms of sandbox, then a real process start and import). "Relays at once" may exceed maxRelays by one: a drain longer than a period meets the scheduled relay's successor while its predecessor still polls. "Events/s once all ran": from the first moment as many relay handlers ran at once as the row allows (the monitor's first invocation and every cold start's sandbox and init behind) to the end of the drain (n/a when they never all ran at once or for under a second), against the single relay's same rate, with the machine's idle share over that span (near 0 %: the machine's cores, not the relays, set the rate) and when that moment came, s from the schedules' firing (the ramp). "Drained in": from the schedules' firing to the bus holding every event. All relays share this machine's cores (in Lambda each has its own share of a vCPU). CPU per event: user + system time from /proc during the drain, divided by the events: the relay processes' (cold starts included), this database's Postgres backends' (every session on it: relays, monitor, the bench's sampling), the bus's; "cores busy": those three together, and the whole machine's (/proc/stat, anyone's work), on average over the drain; "machine idle": the idle share of all ${cpus().length} cores. Near 0 % idle, the machine's CPU is the ceiling, not the relays.`,
  );
}
