/**
 * A function's execution environments, as Lambda manages them: an invocation goes to an idle warm
 * environment if there is one, else to a new one (a cold start: a new process that imports the
 * bundle); an environment runs one invocation at a time, and one whose invocation timed out is
 * discarded. Each environment is a {@link startFunction} process (the bundle from cdk.out, the
 * template's environment and memory, a context whose `getRemainingTimeInMillis` counts down from
 * the timeout).
 *
 * What it does not model, and a caller may add: the time Lambda takes to create a sandbox before
 * the init phase (`coldStartExtraMs`), and the delay of whoever invokes (a scheduler).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type FunctionSpec,
  type InvocationOutcome,
  type RunningFunction,
  startFunction,
} from './lambda-process.ts';

/** One invocation, as it went. */
export interface InvocationRecord {
  /** 1, 2, 3… in the order they were requested. */
  n: number;
  event: unknown;
  /** `Date.now()` when the invocation was requested, when the handler started, and when it returned. */
  requestedAt: number;
  startedAt: number;
  endedAt: number;
  /** It started a new environment (a cold start). */
  coldStart: boolean;
  /** Which environment ran it (1, 2, … in the order they were created). */
  environment: number;
  outcome: InvocationOutcome;
}

/** Options of {@link LambdaService}. */
export interface LambdaServiceOptions {
  spec: FunctionSpec;
  /** The runtime's variables (region, credentials, endpoints) under the template's. */
  baseEnv: Record<string, string>;
  /** The function's timeout, ms. */
  timeoutMs: number;
  /** Added before a new environment starts: the sandbox Lambda creates before the init phase, ms. */
  coldStartExtraMs?: number;
  /** Called when an invocation ends. */
  onEnd?: (record: InvocationRecord) => void;
}

interface Environment {
  id: number;
  fn: RunningFunction;
  busy: boolean;
}

/** A function's pool of execution environments (see the module's comment). */
export class LambdaService {
  readonly records: InvocationRecord[] = [];
  /** When each invocation's handler started (`Date.now()`), ended or still running, in that order. */
  readonly starts: number[] = [];
  readonly #options: LambdaServiceOptions;
  readonly #environments: Environment[] = [];
  readonly #running = new Set<Promise<InvocationRecord>>();
  #requested = 0;
  #created = 0;
  #busy = 0;
  #inHandler = 0;
  #peakBusy = 0;

  constructor(options: LambdaServiceOptions) {
    this.#options = options;
  }

  /** Most invocations that ran at once. */
  get peakConcurrency(): number {
    return this.#peakBusy;
  }

  /** Environments created so far (cold starts). */
  get environmentsCreated(): number {
    return this.#created;
  }

  /** The process ids of the environments alive now (to read their CPU from /proc). */
  get pids(): number[] {
    return this.#environments.flatMap((e) => (e.fn ? [e.fn.pid] : []));
  }

  /** Invocations running now, a new environment's init included. */
  get running(): number {
    return this.#busy;
  }

  /** Invocations whose handler runs now: past a new environment's sandbox and init. */
  get handlersRunning(): number {
    return this.#inHandler;
  }

  /**
   * Invokes the function with `event` and resolves when the invocation has ended (the caller may
   * leave it unawaited: an asynchronous invocation, as EventBridge Scheduler's).
   * @throws when a new environment fails its init (the bundle's import threw)
   */
  invoke(event: unknown): Promise<InvocationRecord> {
    const run = this.#invoke(event);
    this.#running.add(run);
    void run.finally(() => this.#running.delete(run)).catch(() => {});
    return run;
  }

  async #invoke(event: unknown): Promise<InvocationRecord> {
    const n = ++this.#requested;
    const requestedAt = Date.now();
    let env = this.#environments.find((e) => !e.busy);
    const coldStart = !env;
    this.#busy++;
    this.#peakBusy = Math.max(this.#peakBusy, this.#busy);
    try {
      if (!env) {
        const id = ++this.#created;
        // Reserved before the await, so that a concurrent invocation does not take it.
        const placeholder = { id, busy: true } as Environment;
        this.#environments.push(placeholder);
        try {
          if (this.#options.coldStartExtraMs) await sleep(this.#options.coldStartExtraMs);
          placeholder.fn = await startFunction(
            { ...this.#options.spec, name: `${this.#options.spec.name}-${id}` },
            this.#options.baseEnv,
          );
        } catch (error) {
          this.#environments.splice(this.#environments.indexOf(placeholder), 1);
          throw error;
        }
        env = placeholder;
      }
      env.busy = true;
      const startedAt = Date.now();
      this.starts.push(startedAt);
      this.#inHandler++;
      const outcome = await env.fn.invoke(event, this.#options.timeoutMs).finally(() => {
        this.#inHandler--;
      });
      const record: InvocationRecord = {
        n,
        event,
        requestedAt,
        startedAt,
        endedAt: Date.now(),
        coldStart,
        environment: env.id,
        outcome,
      };
      if (
        outcome.type === 'timeout' ||
        (outcome.type === 'error' && /process exited/.test(outcome.error ?? ''))
      ) {
        // Lambda discards the environment of an invocation that timed out (the process is gone).
        this.#environments.splice(this.#environments.indexOf(env), 1);
      } else env.busy = false;
      this.records.push(record);
      this.#options.onEnd?.(record);
      return record;
    } finally {
      this.#busy--;
    }
  }

  /**
   * Stops every environment: after the invocations still running have ended, or (`wait: false`)
   * at once, ending their processes as Lambda discards a sandbox.
   */
  async stop(options: { wait?: boolean } = {}): Promise<void> {
    if (options.wait ?? true) await Promise.allSettled([...this.#running]);
    await Promise.all(this.#environments.map((e) => e.fn?.stop()));
    this.#environments.length = 0;
    await Promise.allSettled([...this.#running]);
  }
}
