/**
 * Runs the real `outbox` command (bin/outbox.js) as a child process, as a user would, with an
 * environment built from scratch so that nothing from the test runner's own environment leaks in.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The CLI's entry point. */
export const OUTBOX_BIN = fileURLToPath(new URL('../../bin/outbox.js', import.meta.url));

/** What a finished CLI run printed, and how it ended. */
export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Options of {@link startCli} and {@link runCli}. */
export interface CliOptions {
  /** The whole environment of the child (PATH is added when missing). */
  env: NodeJS.ProcessEnv;
  /** Written to the child's stdin, which is then closed. */
  stdin?: string;
}

/** Starts the CLI; the caller collects its output and waits for it. */
export function startCli(args: string[], options: CliOptions): ChildProcess {
  const child = spawn(process.execPath, [OUTBOX_BIN, ...args], {
    env: { PATH: process.env.PATH, ...options.env },
    stdio: ['pipe', 'pipe', 'pipe'],
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
