/**
 * The consumer docs (docs/inbox.md, docs/consumer-local.md, docs/inbox-order.md), as a newcomer
 * follows them: their snippets are the files in examples/consumer/ (which `npm run typecheck`
 * compiles, importing the package by its name), the local invocation script runs against a real
 * database, applies the event once, acknowledges it the second time, and exits by itself, and the
 * order table names tests that exist.
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const example = (name: string) => readFile(`${root}examples/consumer/${name}`, 'utf8');
/** Longest the script may take, ms: it must exit by itself well before. */
const EXIT_DEADLINE_MS = 20_000;

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.sql`create table invoices (order_id text primary key, total numeric not null)`;
});
afterAll(async () => {
  await db?.drop();
});

/**
 * Runs the script as `node invoke-locally.ts` would in a service that installed the package: the
 * package's name resolves through node_modules, where the npm workspace links this checkout's
 * shared/consumer (whose entry is the TypeScript source).
 */
function invokeLocally(): Promise<{
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}> {
  const child = spawn(process.execPath, ['invoke-locally.ts'], {
    cwd: `${root}examples/consumer`,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: db.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => {
    stdout += d;
  });
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  const killer = setTimeout(() => child.kill('SIGKILL'), EXIT_DEADLINE_MS);
  return new Promise((resolve) =>
    child.on('close', (code, signal) => {
      clearTimeout(killer);
      resolve({ code, signal, stdout, stderr });
    }),
  );
}

describe('the consumer docs', () => {
  it('shows the example files as they are: handler, event, local invocation', async () => {
    for (const [page, file, lang] of [
      ['inbox.md', 'handler.ts', 'ts'],
      ['inbox.md', 'event.json', 'json'],
      ['consumer-local.md', 'invoke-locally.ts', 'ts'],
    ] as const) {
      const doc = await readFile(`${root}docs/${page}`, 'utf8');
      expect(doc, `docs/${page} shows examples/consumer/${file}`).toContain(
        `\`\`\`${lang}\n${(await example(file)).trimEnd()}\n\`\`\``,
      );
    }
  });

  it('has a local invocation that applies the event once, acknowledges it the second time, and exits by itself', async () => {
    const first = await invokeLocally();
    expect({ code: first.code, signal: first.signal, stderr: first.stderr }).toEqual({
      code: 0,
      signal: null,
      stderr: '',
    });
    // The inbox's ConsumerLag EMF line (docs/observe.md#lag-per-consumer), then the handler's answer.
    const [emf, answer, ...rest] = first.stdout.trim().split('\n');
    expect(JSON.parse(emf ?? '')).toMatchObject({ consumer: 'billing', ConsumerLag: expect.any(Number) });
    expect(answer).toBe("{ invoiced: '8842' }");
    expect(rest).toEqual([]);
    const second = await invokeLocally();
    expect(second.code).toBe(0);
    expect(second.stdout.trim()).toBe(
      "{ inbox: 'duplicate', eventId: '0b9d3c56-2a4f-4e83-9d1e-6f3f1c2f5e77' }",
    );
    expect(await db.sql`select order_id, total::text from invoices`).toEqual([
      { order_id: '8842', total: '120' },
    ]);
  });

  it('names, for each row of the order table, a test of test/consumer/inbox-order.test.ts that exists', async () => {
    const doc = await readFile(`${root}docs/inbox-order.md`, 'utf8');
    const tests = await readFile(`${root}test/consumer/inbox-order.test.ts`, 'utf8');
    const table = doc.slice(doc.indexOf('| situation |'), doc.indexOf('A model-based test'));
    const rows = table.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| situation'));
    expect(rows.length).toBeGreaterThan(10);
    const named = rows
      .map((l) => l.split(' | ').at(-1)?.replace(/ \|$/, '').trim() ?? '')
      .filter((name) => !name.includes('`'));
    const missing = named.filter((name) => !tests.includes(name));
    expect(missing).toEqual([]);
  });
});
