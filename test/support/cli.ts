/**
 * Runs the real `outbox` command (shared/relay/bin/outbox.js), or the consumer package's
 * `outbox-inbox` (shared/consumer/bin/outbox-inbox.js), as a child process, as a user would, with an
 * environment built from scratch so that nothing from the test runner's own environment leaks in.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The CLI's entry point. */
export const OUTBOX_BIN = fileURLToPath(new URL('../../shared/relay/bin/outbox.js', import.meta.url));
/** The consumer package's command: `outbox inbox`'s commands on their own. */
export const OUTBOX_INBOX_BIN = fileURLToPath(
  new URL('../../shared/consumer/bin/outbox-inbox.js', import.meta.url),
);

/**
 * The configuration contract's environment for a CLI run against a test database and a local bus,
 * with short polling; `extra` overrides (an empty string unsets a variable for the CLI).
 */
export function cliEnv(
  target: { db: { url: string }; bus: { url: string } },
  extra: Record<string, string | undefined> = {},
): NodeJS.ProcessEnv {
  return {
    HOME: process.env.HOME,
    DATABASE_URL: target.db.url,
    EVENT_BUS_NAME: 'cli-bus',
    AWS_ENDPOINT_URL_EVENTBRIDGE: target.bus.url,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
    AWS_EC2_METADATA_DISABLED: 'true',
    OUTBOX_POLL_INTERVAL_MS: '20',
    ...extra,
  };
}

/** What a finished CLI run printed, and how it ended. */
export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Longest a CLI command may run in a test, ms (the looping relay is stopped by its test long before). */
export const CLI_DEADLINE_MS = 45_000;

/** Options of {@link startCli} and {@link runCli}. */
export interface CliOptions {
  /** The whole environment of the child (PATH is added when missing). */
  env: NodeJS.ProcessEnv;
  /** Written to the child's stdin, which is then closed. */
  stdin?: string;
  /** The command to run: {@link OUTBOX_BIN} (default) or {@link OUTBOX_INBOX_BIN}. */
  bin?: string;
}

/** Every CLI child still running; killed when the test process exits, so a hung command is never left behind. */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/**
 * Starts the CLI; the caller collects its output and waits for it. A command still running after
 * `CLI_DEADLINE_MS` is killed (its result then has `signal: 'SIGKILL'`): a hang fails the test
 * with what the command printed, instead of outliving the test run.
 */
export function startCli(args: string[], options: CliOptions): ChildProcess {
  const child = spawn(process.execPath, [options.bin ?? OUTBOX_BIN, ...args], {
    env: { PATH: process.env.PATH, ...options.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  running.add(child);
  const deadline = setTimeout(() => child.kill('SIGKILL'), CLI_DEADLINE_MS);
  deadline.unref();
  child.once('exit', () => {
    clearTimeout(deadline);
    running.delete(child);
  });
  child.stdin?.on('error', () => {}); // the command may exit (usage error) before reading its input
  child.stdin?.end(options.stdin ?? '');
  return child;
}

/** Collects a started child's output until it exits. */
export function collect(child: ChildProcess): Promise<CliResult> & { output: () => CliResult } {
  const result: CliResult = { code: null, signal: null, stdout: '', stderr: '' };
  child.stdout?.on('data', (d) => {
    result.stdout += d;
  });
  child.stderr?.on('data', (d) => {
    result.stderr += d;
  });
  const done = new Promise<CliResult>((resolve) =>
    child.on('close', (code, signal) => {
      result.code = code;
      result.signal = signal;
      resolve(result);
    }),
  );
  return Object.assign(done, { output: () => result });
}

/** Runs the CLI to the end. */
export function runCli(args: string[], options: CliOptions): Promise<CliResult> {
  return collect(startCli(args, options));
}

/** Resolves once `text` (a string or a pattern) has appeared in what `read()` returns. */
export async function waitForOutput(
  read: () => string,
  text: string | RegExp,
  timeoutMs = 30_000,
): Promise<void> {
  const started = Date.now();
  const seen = () => (typeof text === 'string' ? read().includes(text) : text.test(read()));
  while (!seen()) {
    if (Date.now() - started > timeoutMs) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${String(text)}; output so far:\n${read()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
