/**
 * The repository's own documents stand alone: no comment, test or doc points a reader at a file
 * the repository does not ship (the product brief the project was designed from lives outside it,
 * and so do its numbered guarantees).
 */
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('..', import.meta.url));
const SKIP = new Set(['node_modules', '.git', 'cdk.out', 'dist', '.pgdata', 'results']);
const TEXT = /\.(ts|js|cjs|mjs|json|md|sql|yml|yaml|sh)$|^run$/;

async function* files(dir: string): AsyncGenerator<string> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (TEXT.test(entry.name) && entry.name !== 'package-lock.json') yield path;
  }
}

describe('repository documents', () => {
  it('cite nothing outside the repository: no DESIGN.md, no numbered guarantee of a brief it does not ship', async () => {
    const self = fileURLToPath(import.meta.url);
    const offending: string[] = [];
    for await (const path of files(repo)) {
      if (path === self) continue;
      const lines = (await readFile(path, 'utf8')).split('\n');
      lines.forEach((line, i) => {
        if (/DESIGN\.md|\bguarantee \d+\b/i.test(line)) offending.push(`${relative(repo, path)}:${i + 1}`);
      });
    }
    expect(offending).toEqual([]);
  });
});
