/**
 * Runs inside a function's own Node process, the way Lambda's Node.js runtime runs a bundle:
 * imports the handler module from the asset folder once (the cold start), then invokes the handler
 * for each event the parent sends over IPC, with a context whose getRemainingTimeInMillis counts
 * down from the function's timeout. Answers with the outcome and the process's peak RSS.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

interface Invoke {
  event: unknown;
  timeoutMs: number;
}

/** Peak resident set size of this process so far, bytes (VmHWM, what Lambda reports as Max Memory Used). */
function peakRssBytes(): number {
  const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return match ? Number(match[1]) * 1024 : process.memoryUsage().rss;
}

const send = (message: Record<string, unknown>) => process.send?.(message);
const taskRoot = process.env.LAMBDA_TASK_ROOT as string;
const [moduleName, exportName] = (process.env._HANDLER as string).split('.') as [string, string];
const file = ['.mjs', '.js', '.cjs']
  .map((ext) => join(taskRoot, moduleName + ext))
  .find((f) => existsSync(f));

const initStarted = performance.now();
let handler: (event: unknown, context: unknown) => Promise<unknown>;
try {
  if (!file) throw new Error(`no ${moduleName}.mjs/.js/.cjs in ${taskRoot}`);
  const module = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  if (typeof module[exportName] !== 'function') throw new Error(`${file} does not export ${exportName}`);
  handler = module[exportName] as typeof handler;
  send({ type: 'ready', initMs: performance.now() - initStarted, peakRss: peakRssBytes() });
} catch (error) {
  send({ type: 'init-error', error: String((error as Error)?.stack ?? error) });
  process.exit(1);
}

process.on('message', async (message: Invoke) => {
  const deadline = Date.now() + message.timeoutMs;
  const context = {
    awsRequestId: randomUUID(),
    functionName: process.env.AWS_LAMBDA_FUNCTION_NAME,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:${process.env.AWS_REGION}:123456789012:function:${process.env.AWS_LAMBDA_FUNCTION_NAME}`,
    memoryLimitInMB: process.env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE,
    logGroupName: `/aws/lambda/${process.env.AWS_LAMBDA_FUNCTION_NAME}`,
    logStreamName: 'rehearsal',
    callbackWaitsForEmptyEventLoop: true,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
  };
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), message.timeoutMs);
  });
  try {
    const result = await Promise.race([handler(message.event, context), timedOut]);
    const durationMs = performance.now() - started;
    if (result === 'timeout') {
      // Lambda ends the sandbox of a timed-out invocation; so does the parent, on this answer.
      send({ type: 'timeout', durationMs, peakRss: peakRssBytes() });
    } else send({ type: 'result', result, durationMs, peakRss: peakRssBytes() });
  } catch (error) {
    send({
      type: 'error',
      error: String((error as Error)?.stack ?? error),
      durationMs: performance.now() - started,
      peakRss: peakRssBytes(),
    });
  } finally {
    clearTimeout(timer);
  }
});
