/**
 * Runs a bundled Lambda handler the way the Node.js runtime runs it, for the bench: the bundle from
 * `cdk.out` is imported once (the init phase: module evaluation, which validates the configuration
 * and constructs the database pool and the EventBridge client), then invoked with a Lambda-shaped
 * event and context, one invocation after another in the same process, as a warm container is.
 *
 * Start it with {@link lambdaNodeArgs} (the heap limits the runtime's bootstrap sets for the
 * function's memory) and the usage preload. Environment:
 * - `LAMBDA_TASK_ROOT`: the asset directory holding `index.mjs`;
 * - `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, `OUTBOX_BENCH_TIMEOUT_MS` (invocation timeout, default 60 s);
 * - `OUTBOX_BENCH_HOST_MODE`: `invoke` (default: invoke until SIGUSR2), `init` (import, report,
 *   exit) or `init-error` (an import that fails on its configuration: reports the cost of
 *   formatting the error's stack, the first time and again);
 * - `OUTBOX_BENCH_HOST_FILE`: where to append one JSON line per phase.
 */
import { randomUUID } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/**
 * Node flags of Lambda's Node.js runtime bootstrap for a function of `memoryMb`: a tenth of the
 * memory for V8's new space (half of it per semi-space), the rest for the old space, plus
 * `--expose-gc` and the larger HTTP header limit. Source: the runtime's `/var/runtime/bootstrap`
 * (new_space = memory / 10, semi_space = new_space / 2, old_space = memory - new_space).
 */
export function lambdaNodeArgs(memoryMb: number): string[] {
  const newSpace = Math.floor(memoryMb / 10);
  return [
    '--expose-gc',
    '--max-http-header-size=81920',
    `--max-semi-space-size=${Math.floor(newSpace / 2)}`,
    `--max-old-space-size=${memoryMb - newSpace}`,
  ];
}

/** One line of the host's report. */
export type HostReport =
  | { phase: 'init'; importMs: number; rss: number; heapUsed: number }
  | { phase: 'init-error'; importMs: number; firstStackMs: number; againStackMs: number; rss: number }
  | { phase: 'invoke'; n: number; ms: number; published: number; rss: number; heapUsed: number };

if (import.meta.main) {
  const root = process.env.LAMBDA_TASK_ROOT as string;
  const mode = process.env.OUTBOX_BENCH_HOST_MODE ?? 'invoke';
  const out = process.env.OUTBOX_BENCH_HOST_FILE;
  const report = (r: HostReport) => {
    if (out) appendFileSync(out, `${JSON.stringify(r)}\n`);
  };
  const memory = Number(process.env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE ?? 128);
  const timeoutMs = Number(process.env.OUTBOX_BENCH_TIMEOUT_MS ?? 60_000);
  const functionName = process.env.AWS_LAMBDA_FUNCTION_NAME ?? 'outbox-relay';

  const started = performance.now();
  let mod: { handler: (event: unknown, context: unknown) => Promise<{ published?: number }> };
  try {
    mod = await import(pathToFileURL(join(root, 'index.mjs')).href);
  } catch (error) {
    const importMs = performance.now() - started;
    if (mode !== 'init-error') throw error;
    // The runtime logs a failed init with its stack; with --enable-source-maps, formatting the
    // first stack loads and parses the source map.
    let t = performance.now();
    void (error as Error).stack;
    const firstStackMs = performance.now() - t;
    const again = new Error('again');
    t = performance.now();
    void again.stack;
    const againStackMs = performance.now() - t;
    report({ phase: 'init-error', importMs, firstStackMs, againStackMs, rss: process.memoryUsage().rss });
    process.exit(0);
  }
  const importMs = performance.now() - started;
  const m = process.memoryUsage();
  report({ phase: 'init', importMs, rss: m.rss, heapUsed: m.heapUsed });
  if (mode === 'init') process.exit(0);

  // EventBridge Scheduler's Lambda target sends the schedule's input; the construct sets none.
  const event = {};
  for (let n = 1; ; n++) {
    const deadline = Date.now() + timeoutMs;
    const context = {
      awsRequestId: randomUUID(),
      functionName,
      functionVersion: '$LATEST',
      invokedFunctionArn: `arn:aws:lambda:us-east-1:123456789012:function:${functionName}`,
      memoryLimitInMB: String(memory),
      logGroupName: `/aws/lambda/${functionName}`,
      logStreamName: '2026/11/30/[$LATEST]bench',
      callbackWaitsForEmptyEventLoop: true,
      getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
      done: () => {},
      fail: () => {},
      succeed: () => {},
    };
    const t = performance.now();
    const summary = await mod.handler(event, context);
    const mem = process.memoryUsage();
    report({
      phase: 'invoke',
      n,
      ms: performance.now() - t,
      published: summary?.published ?? 0,
      rss: mem.rss,
      heapUsed: mem.heapUsed,
    });
  }
}
