/**
 * The bench's shared context, composed of its parts: the database and bus (environment.ts), the
 * profile's parameters (`P`, parameters.ts), the results and tables (report.ts), `outbox relay`
 * runs (relay-runs.ts) and the synthesised bundle (assets.ts). bench/run.ts opens it, runs the
 * sections of bench/sections/ with it, and finishes it.
 */
import { fileURLToPath } from 'node:url';
import { loadRelaySettings, type RelaySettings } from '../../shared/platform/index.ts';
import type { DeployedBenchContext } from '../sections/lambda-lag.ts';
import { deployedAssets } from './assets.ts';
import { openEnvironment } from './environment.ts';
import { benchParameters, type DeployedOverrides } from './parameters.ts';
import { type Checkout, relayRuns } from './relay-runs.ts';
import { load, log, MB, openReport, pct, rate } from './report.ts';

export type { BenchParameters } from './parameters.ts';
export type { Checkout, RelayFigures, RelayRun } from './relay-runs.ts';

/** What bench/run.ts was asked for on its command line. */
export interface BenchOptions {
  full: boolean;
  /** `--only`: the sections to run; all (but the long ones) when undefined. */
  only?: Set<string>;
  /** `--baseline <checkout>`: another checkout measured beside this one. */
  baselineDir?: string;
  /** `--scheduler-delay`: `model` or `none`. */
  schedulerDelay: string;
  /** The deployed sections' knobs (`--lag-rates`, `--lag-seconds`, `--scale-rows`…). */
  deployed?: DeployedOverrides;
  /**
   * `--variant 'K=V,K=V'`: this checkout's bundle again with these relay variables, beside the
   * others in the deployed sections (settings compared side by side in one run).
   */
  variants?: Record<string, string>[];
}

/** Opens the bench: creates its database, starts the bus, measures nothing yet. */
export async function openBench(options: BenchOptions) {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const { full, only, baselineDir } = options;
  const want = (section: string) => !only || only.has(section);
  /** Sections too long for the default run: only when named, or with `--full`. */
  const wantLong = (section: string) => (only ? only.has(section) : full);
  /** The documented defaults, as a deployment without OUTBOX_* variables gets them. */
  const defaults: RelaySettings = loadRelaySettings({ EVENT_BUS_NAME: 'bench-bus' });

  const env = await openEnvironment();
  const [serverVersion] = await env.sql<{ server_version: string }[]>`show server_version`;
  const output = openReport(full ? 'full' : 'quick', serverVersion?.server_version);
  const relay = relayRuns(env, root, baselineDir);
  const bundles = deployedAssets(relay.checkouts, env.busEnv);

  /** The CPU of a relay run over an empty outbox, per checkout (all of them when relay or rounds run). */
  const measureFixedCpu = () =>
    relay.measureFixedCpu(want('relay') || want('rounds') ? relay.checkouts : relay.checkouts.slice(0, 1));
  /**
   * The context of the deployed sections (bench/sections/lambda-lag.ts and those after it), for
   * this checkout's bundle or another's (`--baseline`).
   */
  const deployedContext = (
    checkout: Checkout = relay.checkouts[0] as Checkout,
    relayEnvironment?: Record<string, string>,
  ): DeployedBenchContext => ({
    cdkOut: bundles.cdkOuts.get(checkout.dir) as string,
    checkout: relayEnvironment
      ? `${checkout.label}, ${Object.entries(relayEnvironment)
          .map(([k, v]) => `${k}=${v}`)
          .join(' ')}`
      : checkout.label,
    relayEnvironment,
    databaseUrl: env.dbUrl,
    database: env.dbName,
    sql: env.sql,
    bus: env.bus,
    log,
    report: output.report,
  });
  /** Writes the results (JSON, markdown) and drops the bench's database. */
  async function finish(): Promise<void> {
    output.write(root);
    await env.close();
  }

  return {
    params: benchParameters(full, options.schedulerDelay, options.deployed),
    full,
    root,
    baselineDir,
    defaults,
    want,
    wantLong,
    log,
    load,
    MB,
    rate,
    pct,
    ...env,
    results: output.results,
    tables: output.tables,
    report: output.report,
    ...relay,
    measureFixedCpu,
    ...bundles,
    deployedContext,
    /** The deployed sections' bundles: each checkout's, then this one's with each `--variant`. */
    deployedContexts: (): DeployedBenchContext[] => [
      ...relay.checkouts.map((c) => deployedContext(c)),
      ...(options.variants ?? []).map((v) => deployedContext(relay.checkouts[0] as Checkout, v)),
    ],
    finish,
  };
}

/** The bench's shared context (see {@link openBench}). */
export type Bench = Awaited<ReturnType<typeof openBench>>;
