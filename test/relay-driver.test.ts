/**
 * The database driver under dropped connections: the process survives, with no patch applied to
 * the installed driver (a library cannot patch its users' node_modules).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createTestDatabase } from './support/db.ts';

describe('database driver', () => {
  it('survives connections dropped in the middle of transactions and queries', async () => {
    const db = await createTestDatabase({ max: 1 });
    try {
      const child = spawn(
        process.execPath,
        [fileURLToPath(new URL('./chaos/drop-connections.ts', import.meta.url)), db.url, '8'],
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
      expect(report.terminated).toBeGreaterThan(10);
      expect(report.completed).toBeGreaterThan(100);
    } finally {
      await db.drop();
    }
  }, 60_000);
});
