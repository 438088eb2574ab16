/**
 * The database driver under dropped connections: the process survives, with no patch applied to
 * the installed driver (a library cannot patch its users' node_modules).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { OutboxDeadlineError, withDeadline } from '../../shared/platform/index.ts';
import { createTestDatabase } from '../support/db.ts';

describe('database driver', () => {
  it('survives connections dropped in the middle of transactions and queries', async () => {
    const db = await createTestDatabase({ max: 1 });
    try {
      const child = spawn(
        process.execPath,
        [fileURLToPath(new URL('../chaos/drop-connections.ts', import.meta.url)), db.url, '8'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => {
        out += c;
      });
      child.stderr.on('data', (c: Buffer) => {
        err += c;
      });
      const [code] = (await once(child, 'exit')) as [number | null];
      expect(err).not.toMatch(/TypeError/);
      expect(code).toBe(0);
      const report = JSON.parse(out.trim().split('\n').at(-1) ?? '{}');
      expect(report).toMatchObject({ survived: true, answered: true });
      expect(report.terminated).toBeGreaterThanOrEqual(10);
      expect(report.completed).toBeGreaterThanOrEqual(100);
    } finally {
      await db.drop();
    }
  }, 60_000);
});

describe('client-side deadlines', () => {
  it('gives up on a statement at its deadline, and its late failure surfaces nowhere', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      let failLate: (error: Error) => void = () => {};
      const statement = new Promise<never>((_, reject) => {
        failLate = reject;
      });
      const passOver = new AbortController();
      passOver.abort();
      // Abandoned before it could even start: the pass had already run out of time.
      await expect(withDeadline(statement, 'claim', 5_000, passOver.signal)).rejects.toBeInstanceOf(
        OutboxDeadlineError,
      );
      const started = performance.now();
      await expect(withDeadline(new Promise(() => {}), 'mark published', 50)).rejects.toMatchObject({
        code: 'OUTBOX_DEADLINE',
        operation: 'mark published',
      });
      expect(performance.now() - started).toBeLessThan(1_000);
      failLate(Object.assign(new Error('connection destroyed'), { code: 'CONNECTION_DESTROYED' }));
      await sleep(20);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
