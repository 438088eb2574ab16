/**
 * The relay as deployed, for the bench: the functions and schedules of the synthesised template,
 * run as Lambda runs them ({@link LambdaService}: the bundle from cdk.out in processes of its own,
 * warm environments reused, a context counting down from the template's timeout), invoked the way
 * EventBridge Scheduler invokes them (every period of the template's rate, a little late), with a
 * steady producer and the database's connections counted from `pg_stat_activity`.
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type {
  LambdaService,
  LambdaServiceOptions,
} from '../../shared/local/lambda-runtime/lambda-service.ts';
import {
  readStack,
  type SynthesisedStack,
  type TemplateFunction,
} from '../../shared/local/lambda-runtime/template.ts';
import { seeded } from '../../shared/local/seeded.ts';
import type { Sql } from '../../shared/platform/index.ts';
import { enqueue } from '../../shared/producer/index.ts';

export { seeded };

/** The demo stack `cdk synth` writes. */
export const STACK_NAME = 'OutboxRelayDemo';

/** Reads the synthesised demo stack, deploy-time values standing in as the rehearsal's do. */
export function readDemoStack(cdkOut: string): Promise<SynthesisedStack> {
  return readStack(cdkOut, STACK_NAME, {
    region: 'us-east-1',
    account: '123456789012',
    proxyEndpoint: 'proxy.invalid',
    instanceAddress: 'instance.invalid',
    instancePort: 5432,
  });
}

/** The function whose construct path ends with `suffix` (e.g. `/Outbox/RelayFunction/Resource`). */
export function templateFunction(stack: SynthesisedStack, suffix: string): TemplateFunction {
  const f = stack.functions.find((x) => x.path.endsWith(suffix));
  if (!f) throw new Error(`no function ${suffix} in the template`);
  return f;
}

/**
 * A function of the template as a {@link LambdaService} runs it here: the template's environment
 * with the database and the bus local. RDS Proxy with IAM authentication is not here (no token to
 * sign, no RDS CA bundle), so the PG* and IAM variables give way to `DATABASE_URL`; the pooler
 * setting the template implies (`transaction`, the default with IAM auth: no prepared
 * statements, one statement in flight per connection) is kept, so the connections counted are
 * the ones the deployed relay opens.
 */
export function serviceOptions(
  f: TemplateFunction,
  local: { databaseUrl: string; busUrl: string; lambdaUrl?: string },
  extra: Partial<LambdaServiceOptions> & { environment?: Record<string, string> } = {},
): LambdaServiceOptions {
  const environment: Record<string, string> = {};
  for (const [k, v] of Object.entries(f.environment)) {
    if (/^PG|^OUTBOX_DB_IAM|NODE_EXTRA_CA/.test(k)) continue;
    environment[k] = v;
  }
  return {
    spec: {
      name: f.logicalId,
      assetDir: f.assetDir,
      handler: f.handler,
      memoryMb: f.memoryMb,
      environment: {
        ...environment,
        DATABASE_URL: local.databaseUrl,
        OUTBOX_DB_POOLER: 'transaction',
        ...extra.environment,
      },
    },
    baseEnv: {
      AWS_REGION: 'us-east-1',
      AWS_DEFAULT_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'ASIABENCH',
      AWS_SECRET_ACCESS_KEY: 'bench',
      AWS_SESSION_TOKEN: 'bench',
      AWS_ENDPOINT_URL_EVENTBRIDGE: local.busUrl,
      ...(local.lambdaUrl ? { AWS_ENDPOINT_URL_LAMBDA: local.lambdaUrl } : {}),
    },
    timeoutMs: f.timeoutSeconds * 1000,
    ...extra,
  };
}

/** The bus a deployed bench's relay publishes to: the classic event bus, or the Custom Event Bus (EventsV2). */
export type BusKind = 'classic' | 'custom';

/** A Custom Event Bus ARN of the local bus's form, in the benches' region. */
export const BENCH_BUS_ARN = 'arn:aws:events:us-east-1:123456789012:event-busv2/bench/0123456789abcdef';

/**
 * The environment that points the relay bundle at `kind` on the local bus: nothing for the
 * classic bus (the template's EVENT_BUS_NAME), else OUTBOX_EVENT_BUS_ARN and the EventsV2
 * endpoint, EVENT_BUS_NAME unset (the relay publishes to one bus; 100 entries per call).
 */
export function busEnvironment(kind: BusKind, busUrl: string): Record<string, string> {
  return kind === 'classic'
    ? {}
    : { EVENT_BUS_NAME: '', OUTBOX_EVENT_BUS_ARN: BENCH_BUS_ARN, AWS_ENDPOINT_URL_EVENTBRIDGEV2: busUrl };
}

/** When a schedule's k-th invocation (0, 1, 2…) reaches the function, ms after the schedule's time. */
export type SchedulerDelay = (k: number) => number;

/**
 * EventBridge Scheduler, as the bench assumes it (no published figure for a schedule without a
 * flexible time window): each invocation 0–`jitterMs` late (uniform, seeded), and the invocation
 * numbered `late.k` a further `late.ms` late, a bad minute.
 */
export function schedulerDelay(
  seed: number,
  jitterMs: number,
  late?: { k: number; ms: number },
): SchedulerDelay {
  const random = seeded(seed);
  const delays = new Map<number, number>();
  return (k) => {
    let d = delays.get(k);
    if (d === undefined) {
      d = random() * jitterMs + (late && late.k === k ? late.ms : 0);
      delays.set(k, d);
    }
    return d;
  };
}

/**
 * Invokes `service` on a schedule: at `start + k × periodMs + delay(k)` for k = 0, 1, 2… until
 * stopped, asynchronously (an invocation is not awaited: Scheduler invokes Lambda with
 * InvocationType Event). Returns the stop function.
 */
export function runSchedule(
  service: LambdaService,
  periodMs: number,
  input: unknown,
  delay: SchedulerDelay,
  onError: (error: unknown) => void,
): { start: number; stop: () => void } {
  const start = Date.now();
  let stopped = false;
  const timers: NodeJS.Timeout[] = [];
  const plan = (k: number) => {
    if (stopped) return;
    const at = start + k * periodMs + delay(k);
    timers.push(
      setTimeout(
        () => {
          if (stopped) return;
          service.invoke(input).catch(onError);
          plan(k + 1);
        },
        Math.max(0, at - Date.now()),
      ),
    );
  };
  plan(0);
  return {
    start,
    stop: () => {
      stopped = true;
      for (const t of timers) clearTimeout(t);
    },
  };
}

/**
 * Counts the database connections of one application (`pg_stat_activity.application_name`) every
 * `everyMs` until stopped; `peak` is the largest count seen.
 */
export function sampleConnections(
  sql: Sql,
  database: string,
  applicationName: string,
  everyMs = 100,
): { samples: [number, number][]; peak: () => number; stop: () => Promise<void> } {
  const samples: [number, number][] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      // A sample that fails (the shared server out of lock slots, say) is skipped, not fatal.
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where datname = ${database} and application_name = ${applicationName}`.catch(() => [undefined]);
      if (row) samples.push([Date.now(), row.n]);
      await sleep(everyMs);
    }
  })();
  return {
    samples,
    peak: () => Math.max(0, ...samples.map(([, n]) => n)),
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

/**
 * Commits `ratePerSecond` events a second, each in a transaction of its own, until stopped;
 * `committedAt` maps each event's id to `Date.now()` just after its commit returned.
 */
export function steadyProducer(
  sql: Sql,
  ratePerSecond: number,
  aggregates = 5_000,
): { committedAt: Map<string, number>; sent: () => number; stop: () => Promise<void> } {
  const committedAt = new Map<string, number>();
  let sent = 0;
  let running = true;
  const inflight = new Set<Promise<void>>();
  const start = performance.now();
  const loop = (async () => {
    while (running) {
      const due = Math.floor(((performance.now() - start) / 1000) * ratePerSecond);
      while (sent < due) {
        sent++;
        const n = sent;
        const p = sql
          .begin((tx) =>
            enqueue(tx, {
              type: 'OrderPlaced',
              source: 'bench.orders',
              aggregateType: 'order',
              aggregateId: String(n % aggregates),
              payload: { n },
            }),
          )
          .then((r) => {
            committedAt.set(r.eventId, Date.now());
          })
          .finally(() => inflight.delete(p));
        inflight.add(p);
      }
      await sleep(5);
    }
    await Promise.all(inflight);
  })();
  return {
    committedAt,
    sent: () => sent,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

/** The `p`-th percentile of `xs` (nearest rank). */
export function percentile(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0;
}

/** User + system CPU of a live process, ms (/proc/<pid>/stat); undefined once it has exited. */
function cpuOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // utime and stime are the 12th and 13th fields after the command name (which may hold spaces).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // USER_HZ 100
  } catch {
    return undefined;
  }
}

/** The machine's CPU time so far from /proc/stat, ms: idle (idle + iowait) and total, all cores. */
/** The machine's CPU time so far from /proc/stat, ms: idle (with iowait) and total, all cores. */
export function machineCpu(): { idle: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] as string;
  const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const idle = (ticks[3] ?? 0) + (ticks[4] ?? 0);
  return { idle: idle * 10, total: ticks.reduce((a, b) => a + b, 0) * 10 };
}

/** CPU spent during a run, ms, by whom; and the machine's idle share (0–1, all cores). */
export interface CpuFigures {
  /** The function's processes (its environments, cold starts included). */
  functionMs: number;
  /** The server's processes on this database (every session: the relays', the monitor's, the bench's; autovacuum's). */
  postgresMs: number;
  busMs: number;
  idleShare: number;
  /** The machine's cores busy on average over the run (anyone's work). */
  busyCores: number;
}

/**
 * Samples, every `everyMs` until stopped, the CPU of a function's processes (`pids`), of this
 * database's Postgres processes (`pg_stat_activity`, read from /proc: the server runs on this
 * machine) and of the bus, and the machine's idle time. A process that appears counts from 0; one
 * that exits keeps what it had used at its last sample. Linux only.
 */
export function sampleCpu(
  sql: Sql,
  database: string,
  pids: () => number[],
  busCpuMs: () => number,
  everyMs = 250,
): { stop: () => Promise<CpuFigures> } {
  const backends = new Map<number, { first: number; last: number }>();
  const busStart = busCpuMs();
  const machineStart = machineCpu();
  const read = (ids: number[], into: Map<number, { first: number; last: number }>, fromZero: boolean) => {
    for (const pid of ids) {
      const ms = cpuOf(pid);
      if (ms === undefined) continue;
      const known = into.get(pid);
      if (known) known.last = ms;
      else into.set(pid, { first: fromZero ? 0 : ms, last: ms });
    }
  };
  const fns = new Map<number, { first: number; last: number }>();
  let started = false;
  let running = true;
  const sampleOnce = async () => {
    read(pids(), fns, started);
    const rows = await sql<{ pid: number }[]>`
      select pid from pg_stat_activity where datname = ${database}`.catch(() => []);
    read(
      rows.map((r) => r.pid),
      backends,
      started,
    );
    started = true;
  };
  const loop = (async () => {
    while (running) {
      await sampleOnce();
      await sleep(everyMs);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      await sampleOnce();
      const machine = machineCpu();
      const sum = (m: Map<number, { first: number; last: number }>) =>
        [...m.values()].reduce((n, x) => n + x.last - x.first, 0);
      return {
        functionMs: sum(fns),
        postgresMs: sum(backends),
        busMs: busCpuMs() - busStart,
        idleShare: (machine.idle - machineStart.idle) / Math.max(1, machine.total - machineStart.total),
        busyCores:
          (cpus().length * (machine.total - machineStart.total - (machine.idle - machineStart.idle))) /
          Math.max(1, machine.total - machineStart.total),
      };
    },
  };
}
