/**
 * Bench section `enqueue-instructions` (issue 20): the database CPU of one enqueue transaction as
 * the number of instructions its backend executes, counted by valgrind's callgrind, at each step of
 * the enqueue-anatomy section (the plain design's INSERT built up, one part at a time, to
 * `outbox_enqueue` as shipped and the TypeScript `enqueue()`: its STEPS and HELPERS), above a
 * transaction of `select 1`, the floor. Process CPU time (the db-cost and enqueue-anatomy sections)
 * varies ±10% run to run, which leaves the bound "enqueue ≤ 2× the plain design's CPU" undecided
 * when the ratio is near it, and a step's few µs lost in the noise; instruction counts repeat to
 * within 1%. They are not time: a cache miss costs more than an add, and callgrind counts only the
 * backend's own (user-space) instructions, not the kernel's work for it (the socket reads and
 * writes of every statement, the WAL writes), which is much the same per transaction in every
 * step. So the ratio to the plain design is higher than the CPU-time ratio; what it decides
 * without noise is whether a change made the database's own work smaller or larger, by how much,
 * and which part of the enqueue it is in.
 *
 * On a private cluster (embedded Postgres, its server under `valgrind --tool=callgrind`, which
 * writes one file per process, each backend's when it exits). Per step, on one connection of
 * its own (postgres.js with prepared statements, as the other sections): `events` events over
 * `aggregates` aggregates, each in its own transaction (BEGIN, the statement, COMMIT), after a
 * CHECKPOINT, on empty tables whose aggregates all have counters (the steady state of an
 * aggregate seen before, as enqueue-anatomy measures). Instructions per event = (the backend's
 * total − that of a backend that only connected, the mean of one before the steps and one
 * after) / `events`. Autovacuum is off and checkpoints
 * happen only when asked, so that nothing but the step's own work changes the count.
 *
 * Needs `valgrind` on the PATH; without it the section reports that it was skipped.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { searchableByOthers } from '../../dev/permissions.ts';
import { connect, type Sql } from '../../shared/platform/index.ts';
import { setUpPlainOutbox } from '../plain-outbox.ts';
import { fromClients, openDbCostRig, type SectionContext } from './db-cost.ts';
import { emptyWithCountersSeen, HELPERS, STEPS, writeStep } from './enqueue-anatomy.ts';

/** Knobs of the section. */
export interface InstructionsOptions {
  /** Transactions per step, one event each. */
  events: number;
  /** Aggregates the events are spread over (each has a counter beforehand). */
  aggregates: number;
}

/** One step's figures. */
export interface InstructionsStep {
  /** The floor (`select 1`), then enqueue-anatomy's steps as `n. label`. */
  step: string;
  /** Instructions the backend executed per transaction, beyond a backend that only connected. */
  perEvent: number;
  /** `perEvent` ÷ the plain design's (step 1). */
  perPlain: number;
}

/** The section's result; undefined when skipped (no valgrind). */
export interface InstructionsResult {
  steps: InstructionsStep[];
  /**
   * Instructions of a backend that only connected (and asked its pid), before the steps and
   * after them; their mean is subtracted.
   */
  connectOnly: [number, number];
  events: number;
  postgres: string;
  valgrind: string;
}

/**
 * What is counted, in order: the floor, then enqueue-anatomy's steps; each a label and the
 * section's `events` transactions on `sql`, one connection. The plain design is row 1 (step 1).
 */
const ROWS: { step: string; run: (sql: Sql, o: InstructionsOptions) => Promise<unknown> }[] = [
  {
    step: '`select 1` (the floor: BEGIN, a statement, COMMIT)',
    run: (sql, o) => fromClients(o.events, 1, () => sql.begin((tx) => tx`select 1`).then(() => {})),
  },
  ...STEPS.map((s, i) => ({
    step: `${i + 1}. ${s.step}`,
    run: (sql: Sql, o: InstructionsOptions) => writeStep(sql, s, { ...o, clients: 1 }),
  })),
];

/**
 * Runs the section on a cluster of its own under callgrind and reports its table.
 * @returns the figures, or undefined when valgrind is not installed (the section is skipped)
 * @throws when a backend's callgrind file does not appear within two minutes of its exit
 */
export async function enqueueInstructions(
  ctx: SectionContext,
  o: InstructionsOptions,
): Promise<InstructionsResult | undefined> {
  let valgrind: string;
  try {
    valgrind = execFileSync('valgrind', ['--version'], { encoding: 'utf8', stdio: 'pipe' }).trim();
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    ctx.report(
      `### Enqueue instructions: skipped, valgrind is not installed (\`valgrind --version\`: ${reason})`,
    );
    return undefined;
  }
  // As root the server runs as `postgres`, which writes the callgrind files: a directory it can
  // reach and write (a private TMPDIR is not reachable).
  const asRoot = process.getuid?.() === 0;
  const parent = asRoot && !searchableByOthers(tmpdir()) ? '/tmp' : tmpdir();
  const outDir = mkdtempSync(join(parent, 'outbox-callgrind-'));
  chmodSync(outDir, 0o777);
  ctx.log(`enqueue-instructions: starting Postgres under callgrind (${valgrind}), files in ${outDir}`);
  const rig = await openDbCostRig(1, {
    wrapServer: ['valgrind', '-q', '--tool=callgrind', `--callgrind-out-file=${outDir}/cg.%p`],
    postgresFlags: ['-c', 'autovacuum=off', '-c', 'checkpoint_timeout=1d', '-c', 'max_wal_size=100GB'],
  });
  try {
    const [v] = await rig.sql<{ v: string }[]>`select current_setting('server_version') as v`;
    await setUpPlainOutbox(rig.sql);
    await rig.sql.unsafe(HELPERS);
    const backend = async (work: (sql: Sql) => Promise<unknown>): Promise<number> => {
      await emptyWithCountersSeen(rig.sql, o.aggregates);
      await rig.sql`checkpoint`;
      const sql = connect({ url: rig.url, max: 1, env: {} });
      let pid: number;
      try {
        const [row] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
        pid = Number(row?.pid);
        await work(sql);
      } finally {
        await sql.end();
      }
      return await callgrindTotal(join(outDir, `cg.${pid}`));
    };
    const connectOnlyBefore = await backend(async () => {});
    ctx.log(
      `enqueue-instructions: a backend that only connected: ${connectOnlyBefore.toLocaleString('en')} instructions`,
    );
    const totals: number[] = [];
    for (const s of ROWS) {
      const total = await backend((sql) => s.run(sql, o));
      totals.push(total);
      ctx.log(
        `enqueue-instructions ${s.step}: ${Math.round((total - connectOnlyBefore) / o.events).toLocaleString('en')} per event`,
      );
    }
    // Once more at the end: the two agree (a forked backend does not carry the postmaster's count
    // with it), which is what makes one subtraction right for every step.
    const connectOnlyAfter = await backend(async () => {});
    ctx.log(
      `enqueue-instructions: a backend that only connected, at the end: ${connectOnlyAfter.toLocaleString('en')} instructions`,
    );
    const connectOnly = (connectOnlyBefore + connectOnlyAfter) / 2;
    const perEvent = totals.map((t) => (t - connectOnly) / o.events);
    const plain = perEvent[1] as number;
    const steps = ROWS.map((s, i) => ({
      step: s.step,
      perEvent: Math.round(perEvent[i] as number),
      perPlain: Number(((perEvent[i] as number) / plain).toFixed(3)),
    }));
    const result: InstructionsResult = {
      steps,
      connectOnly: [connectOnlyBefore, connectOnlyAfter],
      events: o.events,
      postgres: String(v?.v),
      valgrind,
    };
    ctx.report(table(result, o));
    return result;
  } finally {
    await rig.close();
    rmSync(outDir, { recursive: true, force: true });
  }
}

/**
 * The instructions a process executed, from its callgrind file's `summary:` line. Callgrind
 * writes the file when the process exits, a moment after the client has closed the connection:
 * waits for it.
 * @throws when the file has no summary line after two minutes
 */
async function callgrindTotal(file: string): Promise<number> {
  for (const deadline = Date.now() + 120_000; Date.now() < deadline; await sleep(200)) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    const summary = /^summary:\s*(\d+)/m.exec(text);
    if (summary) return Number(summary[1]);
  }
  throw new Error(
    `enqueue-instructions: no callgrind summary in ${file} two minutes after the backend's exit`,
  );
}

function table(r: InstructionsResult, o: InstructionsOptions): string {
  const k = (x: number) => (x / 1000).toFixed(1);
  const floor = r.steps[0] as InstructionsStep;
  const lines = r.steps.map((s, i) => {
    const prev = r.steps[i - 1];
    const over =
      prev === undefined ? '' : `${s.perEvent >= prev.perEvent ? '+' : ''}${k(s.perEvent - prev.perEvent)}`;
    return `| ${s.step} | ${k(s.perEvent)} | ${s.perPlain.toFixed(2)}× | ${over} | ${i === 0 ? '' : k(s.perEvent - floor.perEvent)} |`;
  });
  return `### An enqueue's database CPU in instructions, step by step, per event (${o.events.toLocaleString('en')} transactions per step, ${o.aggregates.toLocaleString('en')} aggregates seen before)

| step | instructions per event (thousands) | ÷ plain | over the previous step (thousands) | beyond \`select 1\` (thousands) |
|---|---|---|---|---|
${lines.join('\n')}

The steps of enqueue-anatomy (each the one above it plus one part; steps 2–5 are that section's own functions, bench/sections/enqueue-anatomy.ts, writing the product's tables). Instructions executed by the step's backend, counted by callgrind (${r.valgrind}), Postgres ${r.postgres} on a private cluster: (the backend's total − that of a backend that only connected: ${r.connectOnly.map(k).join(' and ')} thousand, before and after the steps) ÷ ${o.events.toLocaleString('en')} transactions, each BEGIN, one statement, COMMIT, over one connection with prepared statements. Deterministic to within 1% run to run, unlike the CPU time of db-cost and enqueue-anatomy; not a measure of time: user-space instructions only, without the kernel's work for each transaction (socket, WAL writes), which is about the same in every step, so the ratios are higher than those of CPU time. Autovacuum off, a CHECKPOINT before each step.`;
}
