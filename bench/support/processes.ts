/**
 * Child processes of the bench: the local bus in a process of its own, and measured processes (a
 * relay, a peer, the bundled Lambda handler) whose CPU and memory the usage preload records.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import type { AcceptedEvent, BusStats, Faults } from '../../shared/local/bus.ts';

const here = fileURLToPath(new URL('.', import.meta.url));
const scripts = mkdtempSync(join(tmpdir(), 'outbox-bench-scripts-'));

/**
 * Plain-JavaScript copies of the scripts that run inside measured processes (the usage preload,
 * the Lambda host). A `.ts` file makes Node load its TypeScript stripper, which costs 17 MB of
 * RSS (41 MB → 58 MB for an empty script, measured here) that a Lambda never pays.
 */
export const SCRIPTS = {
  usagePreload: join(scripts, 'usage-preload.mjs'),
  lambdaHost: join(scripts, 'lambda-host.mjs'),
};
await build({
  entryPoints: {
    'usage-preload': join(here, 'usage-preload.ts'),
    'lambda-host': join(here, 'lambda-host.ts'),
  },
  outdir: scripts,
  outExtension: { '.js': '.mjs' },
  format: 'esm',
  platform: 'node',
  target: 'node24',
  bundle: true,
  logLevel: 'warning',
});
process.once('exit', () => rmSync(scripts, { recursive: true, force: true }));

/** The local bus, running in another process, driven over its control endpoints. */
export interface BusProcess {
  url: string;
  setFaults(faults: Faults): Promise<void>;
  reset(): Promise<void>;
  stats(): Promise<BusStats>;
  events(): Promise<AcceptedEvent[]>;
  /** CPU time the bus process has used so far (user + system, from /proc), ms. */
  cpuMs(): number;
  close(): Promise<void>;
}

/** User + system CPU of a live process from /proc/<pid>/stat, ms (Linux). */
export function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may contain spaces): utime and stime are the 12th and 13th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
}
/** USER_HZ: 100 on every mainstream Linux build. */
const CLOCK_TICKS_PER_SECOND = 100;

/** Starts bus-process.ts and waits for its URL. */
export async function startBusProcess(): Promise<BusProcess> {
  const child = spawn(process.execPath, [join(here, 'bus-process.ts')], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { PATH: process.env.PATH },
  });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`local bus process exited (${code})`)));
  });
  const { url } = JSON.parse(first) as { url: string };
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`local bus ${method} ${path}: HTTP ${res.status}`);
    return res.json();
  };
  return {
    url,
    setFaults: async (faults) => {
      await call('PUT', '/_local/faults', faults);
    },
    reset: async () => {
      await call('POST', '/_local/reset');
    },
    stats: () => call('GET', '/_local/stats') as Promise<BusStats>,
    events: () => call('GET', '/_local/events') as Promise<AcceptedEvent[]>,
    cpuMs: () => processCpuMs(child.pid as number),
    close: async () => {
      child.stdin?.end();
      if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

/** What the usage preload recorded for one process. */
export interface Usage {
  /** User + system CPU time of the whole process, µs. */
  cpuUs: number;
  userUs: number;
  systemUs: number;
  /** Peak resident set size, KiB (getrusage). */
  maxRssKiB: number;
  wallMs: number;
  /** Peaks of the periodic samples, bytes (zero without sampling). */
  peak: { rss: number; heapUsed: number; heapTotal: number; external: number };
  /** [epoch ms, RSS, heap used, heap total, external] (bytes), when sampling was asked for. */
  samples: [number, number, number, number, number][];
}

/** A finished measured process. */
export interface Measured {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Wall time from spawn to exit, ms (process start-up included). */
  wallMs: number;
  usage: Usage;
}

/** Options of {@link startMeasured}. */
export interface MeasuredOptions {
  /** Arguments after `node` (script and its arguments). */
  args: string[];
  env: Record<string, string | undefined>;
  /** Node flags before the preload (e.g. heap limits). */
  nodeArgs?: string[];
  /** Sample memory every this many ms. */
  sampleMs?: number;
  /** Keep stdout (default: discarded, as a Lambda's logs leave the process). */
  keepStdout?: boolean;
}

/** Starts a process with the usage preload; `done` settles when it exits. */
export function startMeasured(o: MeasuredOptions): { child: ChildProcess; done: Promise<Measured> } {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-bench-'));
  const usageFile = join(dir, 'usage.json');
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [...(o.nodeArgs ?? []), '--import', SCRIPTS.usagePreload, ...o.args],
    {
      env: {
        PATH: process.env.PATH,
        ...o.env,
        OUTBOX_BENCH_USAGE_FILE: usageFile,
        OUTBOX_BENCH_SAMPLE_MS: o.sampleMs ? String(o.sampleMs) : undefined,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => {
    if (o.keepStdout) stdout += d;
  });
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d;
  });
  const done = new Promise<Measured>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      const wallMs = performance.now() - started;
      try {
        const usage = JSON.parse(readFileSync(usageFile, 'utf8')) as Usage;
        resolve({ code, stdout, stderr, wallMs, usage });
      } catch (error) {
        reject(new Error(`no usage recorded (exit ${code}): ${stderr.slice(-2000)}`, { cause: error }));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
  return { child, done };
}

/** Runs a measured process to its end; rejects when it exits non-zero. */
export async function runMeasured(o: MeasuredOptions): Promise<Measured> {
  const r = await startMeasured(o).done;
  if (r.code !== 0) throw new Error(`${o.args.join(' ')} exited ${r.code}: ${r.stderr.slice(-2000)}`);
  return r;
}

/** Median of a list of numbers (the lower middle for an even count). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)] ?? 0;
}

/** The 1-minute load average divided by the cores: above 1, other work competed for the CPU. */
export async function machineLoad(): Promise<number> {
  const { loadavg, cpus } = await import('node:os');
  return Number(((loadavg()[0] ?? 0) / cpus().length).toFixed(2));
}
