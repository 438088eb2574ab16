/**
 * A reader that stops reading: `outbox status | head -1`. When the pipe's reader has gone, a
 * write to stdout fails with EPIPE; the command must end quietly, as `head`'s other writers do,
 * and not with Node's unhandled 'error' stack trace. The reader here closes its end before the
 * command writes anything, so every line the command writes meets EPIPE, whatever the timing.
 */
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CLI_DEADLINE_MS, cliEnv, OUTBOX_BIN, OUTBOX_INBOX_BIN } from '../../support/cli.ts';
import { useHarness } from '../../support/harness.ts';

const h = useHarness({ max: 2 });

/** Runs a command whose stdout's reader is gone from the start; its exit and what it wrote on stderr. */
function withClosedStdout(bin: string, args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [bin, ...args], {
    env: { PATH: process.env.PATH, ...cliEnv(h) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.destroy();
  const deadline = setTimeout(() => child.kill('SIGKILL'), CLI_DEADLINE_MS);
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  return new Promise((resolve) =>
    child.on('close', (code) => {
      clearTimeout(deadline);
      resolve({ code, stderr });
    }),
  );
}

describe('a closed stdout (outbox status | head -1)', () => {
  it.each([
    ['outbox status', OUTBOX_BIN, ['status']],
    ['outbox --help', OUTBOX_BIN, ['--help']],
    ['outbox-inbox failed list', OUTBOX_INBOX_BIN, ['failed', 'list', '--consumer', 'billing']],
    ['outbox-inbox --help', OUTBOX_INBOX_BIN, ['--help']],
  ])('%s exits 0 without a stack trace', async (_name, bin, args) => {
    await h.db.sql`select * from outbox_enqueue(event_type => 'T', source => 's',
      aggregate_type => 'a', aggregate_id => '1', payload => '{}'::jsonb)`;
    const r = await withClosedStdout(bin, args);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  });
});
