/**
 * The bench's results and tables: each section reports a markdown table (printed at once) and
 * records its figures; {@link BenchReport.write} saves both to `bench/results/`. With the small
 * helpers the sections share for figures and progress lines.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';

/** A progress line on stderr, with the time of day. */
export const log = (line: string) =>
  process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);
/** 1-minute load average per core: above 1, other work competed with the bench for the CPU. */
export const load = () => Number(((loadavg()[0] ?? 0) / cpus().length).toFixed(2));
/** Bytes in MiB, rounded. */
export const MB = (bytes: number) => Math.round(bytes / 2 ** 20);
/** Events per second from a count and ms. */
export const rate = (n: number, ms: number) => Math.round((n * 1000) / ms);
/** The `p`th percentile (0–100) of `xs`, nearest rank. */
export const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0;
};

/** The results of a profile (`quick` or `full`), with the machine they were taken on. */
export function openReport(profile: 'quick' | 'full', postgresVersion: string | undefined) {
  const results: Record<string, unknown> = {
    profile,
    machine: {
      cores: cpus().length,
      cpu: cpus()[0]?.model,
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      node: process.version,
      loadPerCoreAtStart: load(),
      postgres: postgresVersion,
    },
  };
  const tables: string[] = [];
  /** Prints a section's table and keeps it for the markdown file. */
  const report = (table: string) => {
    tables.push(table);
    process.stdout.write(`${table}\n\n`);
  };
  /** Writes `bench/results/bench-<profile>.json` and `.md` under `root`. */
  function write(root: string): void {
    const m = results.machine as Record<string, unknown>;
    m.loadPerCoreAtEnd = load();
    const markdown = `## Benchmark (${profile} profile)\n\nMachine: ${m.cores} cores (${m.cpu}), ${m.memoryGiB} GiB, Node ${m.node}, PostgreSQL ${m.postgres}; load per core ${m.loadPerCoreAtStart} at the start, ${m.loadPerCoreAtEnd} at the end. Local bus in a process of its own.\n\n${tables.join('\n\n')}\n`;
    mkdirSync(`${root}bench/results`, { recursive: true });
    writeFileSync(`${root}bench/results/bench-${profile}.json`, JSON.stringify(results, null, 2));
    writeFileSync(`${root}bench/results/bench-${profile}.md`, markdown);
    process.stdout.write(`Written to bench/results/bench-${profile}.md, .json and chart-${profile}.svg\n`);
  }
  return { results, tables, report, write };
}
