/**
 * `npm run bench` (quick profile) and `npm run bench -- --full`: what the relay costs where Lambda
 * bills it (CPU per event, memory of the bundled handler, bundle and cold init), its throughput
 * against the peers, and the older tables (batch × concurrency grid, lag, claim cost, producer
 * cost). Each comparison is measured side by side in one run.
 *
 * Real parts only: a real Postgres (embedded, unless DATABASE_URL is set), the local bus in a
 * process of its own (the PutEvents wire protocol, answered by shared/local/bus.ts), the
 * real `@aws-sdk/client-eventbridge`. The relay runs as `outbox relay --until-empty`, a process of
 * its own whose CPU (`process.cpuUsage()`, user + system) and peak RSS a preload records at exit;
 * the Lambda figures come from the bundle `cdk synth` writes, run by a host that imports and
 * invokes it as Lambda's Node.js runtime does, with the heap limits the runtime sets.
 *
 * Options: `--full` (more rows and repeats, the peer tuning grid), `--scheduler-delay none` (the
 * lambda-lag section without its model of Scheduler's delays and cold starts),
 * `--instructions-events n` (the enqueue-instructions section's transactions per step), the deployed
 * sections' short form for a busy machine (`--lag-rates 1000`, `--buses classic`, `--lag-seconds 70`,
 * `--lag-trace`: each event's claim recorded and the lag split at it, `--scale-rows 20000`,
 * `--scale-relays 1,4`, `--scale-start cold,warm`: the backlog also landing on a running deployment;
 * `--baseline` runs the other checkout's bundle beside this one's, `--variant
 * K=V,K=V` this one's with other relay variables), `--only a,b` or
 * `--only a --only b` (run only these sections: relay, rounds, peers, profile, grid, lag, claim,
 * producer, bus-kind, bundle, lambda, scale, lambda-lag, lambda-scale, db-cost, enqueue-anatomy,
 * enqueue-instructions (needs valgrind); and economy, which runs only when
 * named or with `--full`: about 13 minutes of real schedule).
 * Prints markdown tables as they are measured; writes JSON, markdown and an SVG chart to
 * bench/results/. Each section is a module of bench/sections/; a new one goes into SECTIONS.
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { runBundle } from './sections/bundle.ts';
import { runBusKind } from './sections/bus-kind.ts';
import { runClaim } from './sections/claim.ts';
import { dbCost } from './sections/db-cost.ts';
import { economy } from './sections/economy.ts';
import { enqueueAnatomy } from './sections/enqueue-anatomy.ts';
import { enqueueInstructions } from './sections/enqueue-instructions.ts';
import { runGrid } from './sections/grid.ts';
import { runLag } from './sections/lag.ts';
import { runLambda } from './sections/lambda.ts';
import { lambdaLag, lambdaLagSummary } from './sections/lambda-lag.ts';
import { lambdaScale } from './sections/lambda-scale.ts';
import { runPeers } from './sections/peers.ts';
import { runProducer } from './sections/producer.ts';
import { runProfile } from './sections/profile.ts';
import { runRelayCpu } from './sections/relay-cpu.ts';
import { runScale } from './sections/scale.ts';
import { type Bench, openBench } from './support/bench.ts';

const { values } = parseArgs({
  options: {
    full: { type: 'boolean', default: false },
    only: { type: 'string', multiple: true },
    baseline: { type: 'string' },
    /** `lambda-lag`: `model` (Scheduler 0–2 s late, one invocation 15 s late, 1 s sandbox) or `none`. */
    'scheduler-delay': { type: 'string', default: 'model' },
    /** `economy`: mean seconds between events (0: none, a quiet outbox). */
    'economy-gap-seconds': { type: 'string' },
    /** `economy`: `steady,economy` (default) or one of them. */
    'economy-modes': { type: 'string' },
    /** `enqueue-instructions`: transactions per step (default 2,000). */
    'instructions-events': { type: 'string' },
    /** `lambda-lag`: events/s of the runs, comma-separated (default 100,1000). */
    'lag-rates': { type: 'string' },
    /** `lambda-lag` and `lambda-scale`: buses, comma-separated (default classic,custom). */
    buses: { type: 'string' },
    /** `lambda-lag`: seconds the producer runs (default across 3 boundaries: 195 s). */
    'lag-seconds': { type: 'string' },
    /** `lambda-lag`: record each event's claim (a trigger) and split the lag at it. */
    'lag-trace': { type: 'boolean', default: false },
    /** `lambda-scale`: the backlog (default 50,000 events). */
    'scale-rows': { type: 'string' },
    /** `lambda-scale`: relay counts, comma-separated (default 1,2,4). */
    'scale-relays': { type: 'string' },
    /**
     * `lambda-scale`: how the backlog meets the deployment, comma-separated (default cold): `cold`,
     * nothing running when both schedules fire; `warm`, the backlog lands while the scheduled relay
     * polls and just before the warm monitor's next firing.
     */
    'scale-start': { type: 'string' },
    /** Deployed sections: this checkout's bundle again with relay variables `K=V,K=V` (repeatable). */
    variant: { type: 'string', multiple: true },
  },
});

/** A comma-separated list of whole numbers of at least 1, from option `name`. */
function counts(name: string, value: string | undefined): number[] | undefined {
  if (value === undefined) return undefined;
  const xs = value.split(',').map(Number);
  if (xs.some((x) => !Number.isInteger(x) || x < 1))
    throw new Error(
      `--${name}: ${JSON.stringify(value)} is not a comma-separated list of whole numbers of at least 1`,
    );
  return xs;
}
const buses = values.buses?.split(',') as ('classic' | 'custom')[] | undefined;
if (buses?.some((b) => b !== 'classic' && b !== 'custom'))
  throw new Error(`--buses: ${JSON.stringify(values.buses)}: classic, custom or both`);
const scaleStarts = values['scale-start']?.split(',') as ('cold' | 'warm')[] | undefined;
if (scaleStarts?.some((b) => b !== 'cold' && b !== 'warm'))
  throw new Error(`--scale-start: ${JSON.stringify(values['scale-start'])}: cold, warm or both`);

/** A section of the bench: a module of bench/sections/. */
interface Section {
  /** What `--only` selects it by (a module may measure several parts, each checked with `want`). */
  names: string[];
  /** Only when named, or with `--full`. */
  long?: boolean;
  /** Needs the CPU of a relay run over an empty outbox measured first. */
  relayCpu?: boolean;
  /** Needs `cdk synth` (the relay bundle and the template). */
  bundle?: boolean;
  run: (bench: Bench) => Promise<void>;
}

/** The sections, in the order they run. */
const SECTIONS: Section[] = [
  { names: ['relay', 'rounds'], relayCpu: true, run: runRelayCpu },
  { names: ['peers'], relayCpu: true, run: runPeers },
  { names: ['profile'], relayCpu: true, run: runProfile },
  { names: ['grid'], relayCpu: true, run: runGrid },
  { names: ['lag'], run: runLag },
  { names: ['bus-kind'], run: runBusKind },
  { names: ['claim'], run: runClaim },
  { names: ['producer'], run: runProducer },
  { names: ['bundle'], bundle: true, run: runBundle },
  { names: ['lambda'], bundle: true, run: runLambda },
  { names: ['scale'], run: runScale },
  {
    names: ['lambda-lag'],
    bundle: true,
    run: async (bench) => {
      // Each checkout's bundle (this one, and --baseline's) at each rate and bus, side by side.
      const runs = [];
      for (const run of bench.params.lambdaLagRuns)
        for (const ctx of bench.deployedContexts())
          runs.push(await lambdaLag(ctx, { ...bench.params.lambdaLag, ...run }));
      bench.results.lambdaLag = runs;
      bench.report(lambdaLagSummary(runs));
    },
  },
  {
    names: ['lambda-scale'],
    bundle: true,
    run: async (bench) => {
      bench.results.lambdaScale = await lambdaScale(bench.deployedContexts(), bench.params.lambdaScale);
    },
  },
  {
    // The outbox's cost in the user's database: WAL and server CPU per event, beside the plain design.
    names: ['db-cost'],
    run: async (bench) => {
      bench.results.dbCost = await dbCost(bench, {
        events: 20_000,
        aggregates: 5_000,
        clients: 4,
        repeats: 3,
      });
    },
  },
  {
    // What each part of an enqueue costs the database: the plain INSERT built up to outbox_enqueue.
    names: ['enqueue-anatomy'],
    run: async (bench) => {
      bench.results.enqueueAnatomy = await enqueueAnatomy(bench, {
        events: 20_000,
        aggregates: 5_000,
        clients: 4,
        repeats: 3,
      });
    },
  },
  {
    // An enqueue's database CPU as instructions counted by callgrind: deterministic, unlike CPU time.
    names: ['enqueue-instructions'],
    run: async (bench) => {
      const events = Number(values['instructions-events'] ?? 2_000);
      if (!Number.isInteger(events) || events < 1) {
        throw new Error(
          `--instructions-events: ${JSON.stringify(values['instructions-events'])} is not a whole number of transactions of at least 1`,
        );
      }
      bench.results.enqueueInstructions = await enqueueInstructions(bench, { events, aggregates: 500 });
    },
  },
  {
    names: ['economy'],
    long: true,
    bundle: true,
    run: async (bench) => {
      bench.results.economy = await economy(bench.deployedContext(), {
        ...bench.params.economy,
        ...(values['economy-gap-seconds'] === undefined
          ? {}
          : { meanGapMs: Number(values['economy-gap-seconds']) * 1000 }),
        ...(values['economy-modes'] === undefined
          ? {}
          : { modes: values['economy-modes'].split(',') as ('steady' | 'economy')[] }),
      });
    },
  },
];

const bench = await openBench({
  full: values.full,
  only: values.only ? new Set(values.only.flatMap((o) => o.split(','))) : undefined,
  baselineDir: values.baseline ? `${resolve(values.baseline)}/` : undefined,
  schedulerDelay: values['scheduler-delay'],
  variants: values.variant?.map((v) => {
    const entries = v.split(',').map((kv) => kv.split('='));
    if (entries.some((e) => e.length !== 2 || !/^[A-Z_][A-Z0-9_]*$/.test(e[0] as string)))
      throw new Error(`--variant: ${JSON.stringify(v)} is not K=V,K=V`);
    return Object.fromEntries(entries) as Record<string, string>;
  }),
  deployed: {
    lagRates: counts('lag-rates', values['lag-rates']),
    lagBuses: buses,
    lagSeconds: counts('lag-seconds', values['lag-seconds'])?.[0],
    lagTrace: values['lag-trace'],
    scaleRows: counts('scale-rows', values['scale-rows'])?.[0],
    scaleRelays: counts('scale-relays', values['scale-relays']),
    scaleBuses: buses,
    scaleStarts,
  },
});
const chosen = SECTIONS.filter((s) => s.names.some((n) => (s.long ? bench.wantLong(n) : bench.want(n))));
if (chosen.some((s) => s.relayCpu)) await bench.measureFixedCpu();
if (chosen.some((s) => s.bundle)) await bench.synth();
for (const section of chosen) await section.run(bench);
await bench.finish();
