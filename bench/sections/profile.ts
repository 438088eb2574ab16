import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Bench } from '../support/bench.ts';
import { type CpuProfile, type ProfileRow, summariseProfile } from '../support/cpu-profile.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runProfile(bench: Bench): Promise<void> {
  const { params, results, bus, reset, seed, report, log, want, runRelayProcess, relayAt } = bench;
  // 3. Where the CPU goes: a V8 CPU profile of the relay process, idle time removed.
  if (want('profile')) {
    const rows: string[] = [];
    const out: Record<string, unknown> = {};
    for (const latency of [0, 20]) {
      await bus.setFaults({ latencyMs: latency });
      await reset();
      await seed(params.rows);
      const dir = mkdtempSync(join(tmpdir(), 'outbox-prof-'));
      log(`profile: ${params.rows} rows at ${latency} ms`);
      await runRelayProcess({}, ['--cpu-prof', `--cpu-prof-dir=${dir}`, '--cpu-prof-interval=250']);
      const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile')) as string;
      const s = summariseProfile(JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile, 12);
      rmSync(dir, { recursive: true, force: true });
      // Shares of the sampled main-thread CPU, applied to the unprofiled process CPU per event
      // (profiling itself slows the process down).
      const perEvent = relayAt.get(latency)?.processCpuPerEventUs;
      out[latency] = { ...s, processCpuPerEventUs: perEvent };
      rows.push(
        `#### ${latency} ms\n\n| charged to | share of CPU | µs per event |\n|---|---|---|\n${s.chargedTo
          .slice(0, 9)
          .map(
            (r: ProfileRow) =>
              `| ${r.name} | ${(r.share * 100).toFixed(1)} % | ${perEvent ? ((r.share * perEvent) | 0).toString() : '—'} |`,
          )
          .join('\n')}\n\nHeaviest functions (self time): ${s.topFunctions
          .slice(0, 8)
          .map((r) => `${r.name} ${(r.share * 100).toFixed(1)} %`)
          .join('; ')}.`,
      );
    }
    results.cpuProfile = out;
    report(
      `### Where the relay's CPU goes (V8 CPU profile of \`outbox relay --until-empty\`, ${params.rows} events, idle samples removed)

  Each sample is charged to the nearest frame up its stack that belongs to a package or to our code, so socket writes and \`JSON.stringify\` count against their caller; GC and \`(program)\` have no JavaScript stack. µs per event = share × the whole-process CPU per event measured without the profiler. Start-up (module loading) is part of the process and shows as its own rows.

  ${rows.join('\n\n')}`,
    );
  }
}
