/**
 * `node --import ./bench/support/usage-preload.ts …`: records what the process cost, for the bench.
 *
 * At exit (or on SIGUSR2, which the bench sends to a process that would otherwise idle until its
 * deadline, like a Lambda handler polling an empty outbox) it writes JSON to the file named by
 * `OUTBOX_BENCH_USAGE_FILE`:
 * - `cpuUs`: `process.cpuUsage()` user + system, µs, over the whole process (start-up included);
 * - `maxRssKiB`: peak resident set size (`process.resourceUsage().maxRSS`, KiB);
 * - with `OUTBOX_BENCH_SAMPLE_MS` set, `samples`: [wall clock, ms since the epoch; RSS bytes; V8 heap
 *   used bytes; V8 heap total bytes; external (Buffers and other memory outside the V8 heap that
 *   JavaScript objects hold) bytes] every that many ms, and the peaks of each.
 * Nothing is written when the variable is unset, so the preload is inert elsewhere.
 */
import { writeFileSync } from 'node:fs';

const file = process.env.OUTBOX_BENCH_USAGE_FILE;
if (file) {
  const started = performance.now();
  const samples: [number, number, number, number, number][] = [];
  const peak = { rss: 0, heapUsed: 0, heapTotal: 0, external: 0 };
  const sample = () => {
    const m = process.memoryUsage();
    peak.rss = Math.max(peak.rss, m.rss);
    peak.heapUsed = Math.max(peak.heapUsed, m.heapUsed);
    peak.heapTotal = Math.max(peak.heapTotal, m.heapTotal);
    peak.external = Math.max(peak.external, m.external);
    samples.push([Date.now(), m.rss, m.heapUsed, m.heapTotal, m.external]);
  };
  const every = Number(process.env.OUTBOX_BENCH_SAMPLE_MS ?? 0);
  if (every > 0) setInterval(sample, every).unref();
  let written = false;
  const write = () => {
    if (written) return;
    written = true;
    if (every > 0) sample();
    const cpu = process.cpuUsage();
    writeFileSync(
      file,
      JSON.stringify({
        cpuUs: cpu.user + cpu.system,
        userUs: cpu.user,
        systemUs: cpu.system,
        maxRssKiB: process.resourceUsage().maxRSS,
        wallMs: performance.now() - started,
        peak,
        samples,
      }),
    );
  };
  process.once('exit', write);
  process.once('SIGUSR2', () => {
    write();
    process.exit(0);
  });
}
