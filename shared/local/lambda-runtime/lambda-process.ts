/**
 * One function of the template in a Node process of its own, as Lambda runs it: its asset folder
 * from cdk.out as the task root, its handler, its environment, the V8 heap capped to its memory the
 * way the Node.js runtime's bootstrap caps it, and invocations that count down from its timeout.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

// Compiled into the relay package, this module is a .js beside lambda-child.js.
const CHILD = fileURLToPath(
  new URL(import.meta.url.endsWith('.ts') ? './lambda-child.ts' : './lambda-child.js', import.meta.url),
);

/** What an invocation came to. */
export interface InvocationOutcome {
  type: 'result' | 'error' | 'timeout';
  result?: unknown;
  error?: string;
  durationMs: number;
  /** Peak RSS of the process so far, bytes. */
  peakRss: number;
}

/** A warm function: one process, invoked again and again until stopped. */
export interface RunningFunction {
  name: string;
  /** The process id (its CPU is in /proc/<pid>/stat). */
  pid: number;
  initMs: number;
  /** Every line the function wrote to stdout or stderr (its log: JSON logs and EMF). */
  logLines: string[];
  invoke(event: unknown, timeoutMs: number): Promise<InvocationOutcome>;
  stop(): Promise<void>;
}

/** The function as the template declares it. */
export interface FunctionSpec {
  name: string;
  assetDir: string;
  handler: string;
  memoryMb: number;
  environment: Record<string, string>;
  /** Called with each line the function writes (its log), as it writes it; the lines are kept in `logLines` too. */
  onLog?: (line: string) => void;
}

/**
 * Heap flags of the Node.js runtime's bootstrap for a given memory size: a tenth of the memory
 * for the new space (half of it per semi-space) and the rest for the old space.
 */
export function lambdaHeapFlags(memoryMb: number): string[] {
  const newSpace = Math.floor(memoryMb / 10);
  return [`--max-semi-space-size=${Math.floor(newSpace / 2)}`, `--max-old-space-size=${memoryMb - newSpace}`];
}

/**
 * Starts the function's process and imports its handler (the cold start).
 * @param baseEnv the runtime's variables (region, credentials, endpoints) under the template's
 * @throws when the handler cannot be imported (its error, e.g. a configuration error at cold start)
 */
export async function startFunction(
  spec: FunctionSpec,
  baseEnv: Record<string, string>,
): Promise<RunningFunction> {
  const child: ChildProcess = fork(CHILD, [], {
    execArgv: lambdaHeapFlags(spec.memoryMb),
    env: {
      PATH: process.env.PATH ?? '',
      ...baseEnv,
      ...spec.environment,
      LAMBDA_TASK_ROOT: spec.assetDir,
      _HANDLER: spec.handler,
      AWS_LAMBDA_FUNCTION_NAME: spec.name,
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(spec.memoryMb),
      AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs24.x',
      TZ: ':UTC',
    },
    cwd: spec.assetDir,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const logLines: string[] = [];
  const onLine = (line: string) => {
    logLines.push(line);
    spec.onLog?.(line);
  };
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', onLine);
  createInterface({ input: child.stderr as NodeJS.ReadableStream }).on('line', onLine);
  const messages: Record<string, unknown>[] = [];
  let wake: (() => void) | undefined;
  child.on('message', (m: Record<string, unknown>) => {
    messages.push(m);
    wake?.();
  });
  child.on('exit', (code, signal) => {
    messages.push({ type: 'exit', code, signal });
    wake?.();
  });
  const next = async () => {
    while (messages.length === 0) await new Promise<void>((r) => (wake = r));
    return messages.shift() as Record<string, unknown>;
  };
  const ready = await next();
  if (ready.type !== 'ready') {
    throw new Error(
      `${spec.name}: init failed: ${String(ready.error ?? JSON.stringify(ready))}\n${logLines.join('\n')}`,
    );
  }
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL'); // Lambda freezes and later discards a sandbox; it never runs exit handlers
    await exited;
  };
  return {
    name: spec.name,
    pid: child.pid as number,
    initMs: Number(ready.initMs),
    logLines,
    async invoke(event, timeoutMs) {
      child.send({ event, timeoutMs });
      const outcome = await next();
      if (outcome.type === 'exit') {
        return {
          type: 'error',
          error: `process exited (${JSON.stringify(outcome)})`,
          durationMs: 0,
          peakRss: 0,
        };
      }
      if (outcome.type === 'timeout') await stop();
      return outcome as unknown as InvocationOutcome;
    },
    stop,
  };
}
