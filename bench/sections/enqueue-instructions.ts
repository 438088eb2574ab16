/**
 * Bench section `enqueue-instructions` (issue 20): the database CPU of one enqueue transaction as
 * the number of instructions its backend executes, counted by valgrind's callgrind, beside the
 * plain design's INSERT (bench/plain-outbox.ts) and a transaction of `select 1`. Process CPU time
 * (the db-cost and enqueue-anatomy sections) varies ±10% run to run, which leaves the bound
 * "enqueue ≤ 2× the plain design's CPU" undecided when the ratio is near it; instruction counts
 * repeat to within 1%. They are not time: a cache miss costs more than an add, and callgrind counts
 * only the backend's own (user-space) instructions, not the kernel's work for it (the socket reads
 * and writes of every statement, the WAL writes), which is much the same per transaction in every
 * variant. So the ratio to the plain design is higher than the CPU-time ratio; what it decides
 * without noise is whether a change made the database's own work smaller or larger, and by how much.
 *
 * On a private cluster (embedded Postgres, its server under `valgrind --tool=callgrind`, which
 * writes one file per process, each backend's when it exits). Per variant, on one connection of
 * its own (postgres.js with prepared statements, as the other sections): `events` events over
 * `aggregates` aggregates, each in its own transaction (BEGIN, the statement, COMMIT), after a
 * CHECKPOINT, on empty tables whose aggregates all have counters (the steady state of an
 * aggregate seen before, as enqueue-anatomy measures). Instructions per event = (the backend's
 * total − that of a backend that only connected, the mean of one before the variants and one
 * after) / `events`. Autovacuum is off and checkpoints
 * happen only when asked, so that nothing but the variant's own work changes the count.
 *
 * Needs `valgrind` on the PATH; without it the section reports that it was skipped.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { searchableByOthers } from '../../dev/permissions.ts';
import { connect, type Sql } from '../../shared/platform/index.ts';
import { enqueue } from '../../shared/producer/index.ts';
import { plainEnqueue, setUpPlainOutbox } from '../plain-outbox.ts';
import {
  benchEvent,
  enqueueThroughFunction,
  fromClients,
  openDbCostRig,
  type SectionContext,
} from './db-cost.ts';
import { emptyWithCountersSeen } from './enqueue-anatomy.ts';

/** Knobs of the section. */
export interface InstructionsOptions {
  /** Transactions per variant, one event each. */
  events: number;
  /** Aggregates the events are spread over (each has a counter beforehand). */
  aggregates: number;
}

/** One variant's figures. */
export interface InstructionsVariant {
  variant: string;
  /** Instructions the backend executed per transaction, beyond a backend that only connected. */
  perEvent: number;
  /** `perEvent` ÷ the plain design's. */
  perPlain: number;
}

/** The section's result; undefined when skipped (no valgrind). */
export interface InstructionsResult {
  variants: InstructionsVariant[];
  /**
   * Instructions of a backend that only connected (and asked its pid), before the variants and
   * after them; their mean is subtracted.
   */
  connectOnly: [number, number];
  events: number;
  postgres: string;
  valgrind: string;
}

/** The variants: a label, and the section's `events` transactions on `sql`, one connection. */
const VARIANTS: {
  variant: string;
  run: (sql: Sql, o: InstructionsOptions) => Promise<unknown>;
}[] = [
  {
    variant: '`select 1` (the floor: BEGIN, a statement, COMMIT)',
    run: (sql, o) => fromClients(o.events, 1, () => sql.begin((tx) => tx`select 1`).then(() => {})),
  },
  {
    variant: 'plain design: one INSERT of its row',
    run: (sql, o) =>
      fromClients(o.events, 1, async (i) => {
        const e = benchEvent(i, o.aggregates);
        await sql.begin((tx) => plainEnqueue(tx, { ...e, dedupKey: randomUUID() }));
      }),
  },
  {
    variant: '`outbox_enqueue`',
    run: (sql, o) => enqueueThroughFunction(sql, { ...o, clients: 1 }),
  },
  {
    variant: '`enqueue()` from TypeScript',
    run: (sql, o) =>
      fromClients(o.events, 1, async (i) => {
        const e = benchEvent(i, o.aggregates);
        await sql.begin((tx) =>
          enqueue(tx as unknown as Sql, {
            type: e.type,
            source: e.source,
            aggregateType: 'order',
            aggregateId: e.aggregateId,
            payload: e.payload,
          }),
        );
      }),
  },
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
    for (const s of VARIANTS) {
      const total = await backend((sql) => s.run(sql, o));
      totals.push(total);
      ctx.log(
        `enqueue-instructions ${s.variant}: ${Math.round((total - connectOnlyBefore) / o.events).toLocaleString('en')} per event`,
      );
    }
    // Once more at the end: the two agree (a forked backend does not carry the postmaster's count
    // with it), which is what makes one subtraction right for every variant.
    const connectOnlyAfter = await backend(async () => {});
    ctx.log(
      `enqueue-instructions: a backend that only connected, at the end: ${connectOnlyAfter.toLocaleString('en')} instructions`,
    );
    const connectOnly = (connectOnlyBefore + connectOnlyAfter) / 2;
    const perEvent = totals.map((t) => (t - connectOnly) / o.events);
    const plain = perEvent[1] as number;
    const variants = VARIANTS.map((s, i) => ({
      variant: s.variant,
      perEvent: Math.round(perEvent[i] as number),
      perPlain: Number(((perEvent[i] as number) / plain).toFixed(3)),
    }));
    const result: InstructionsResult = {
      variants,
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
  const floor = r.variants[0] as InstructionsVariant;
  const lines = r.variants.map(
    (s, i) =>
      `| ${s.variant} | ${k(s.perEvent)} | ${s.perPlain.toFixed(2)}× | ${i === 0 ? '' : k(s.perEvent - floor.perEvent)} |`,
  );
  return `### An enqueue's database CPU in instructions, per event (${o.events.toLocaleString('en')} transactions per variant, ${o.aggregates.toLocaleString('en')} aggregates seen before)

| variant | instructions per event (thousands) | ÷ plain | beyond \`select 1\` (thousands) |
|---|---|---|---|
${lines.join('\n')}

Instructions executed by the variant's backend, counted by callgrind (${r.valgrind}), Postgres ${r.postgres} on a private cluster: (the backend's total − that of a backend that only connected: ${r.connectOnly.map(k).join(' and ')} thousand, before and after the variants) ÷ ${o.events.toLocaleString('en')} transactions, each BEGIN, one statement, COMMIT, over one connection with prepared statements. Deterministic to within 1% run to run, unlike the CPU time of db-cost and enqueue-anatomy; not a measure of time: user-space instructions only, without the kernel's work for each transaction (socket, WAL writes), which is about the same in every variant, so the ratios are higher than those of CPU time. Autovacuum off, a CHECKPOINT before each variant.`;
}
