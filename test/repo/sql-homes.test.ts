/**
 * The relay's, the inbox's and the operations' (the relay's and the consumer's) statements live in their `sql/` folders (one module
 * each, beside its row type), so that a reader finds every statement on a table in one place and a
 * shared condition is written once. roles.ts is the one exception: its statements are the grants.
 */
import { readdir, readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';

const shared = new URL('../../shared/', import.meta.url);
const EXCEPTIONS = new Set(['relay/operations/roles.ts']);

/** A porsager tagged-template statement (`sql\`…\``, `tx<Row[]>\`…\``), comments left out. */
const STATEMENT = /\b(?:sql|tx)(?:<[^`]{0,400}?>)?`/;
const withoutComments = (code: string) => code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');

describe('SQL homes', () => {
  it('no relay, consumer, operations or CLI module outside sql/ writes a statement', async () => {
    const offending: string[] = [];
    for (const role of [
      'relay',
      'consumer',
      'relay/operations',
      'relay/cli',
      'consumer/operations',
      'consumer/cli',
      'platform/cli',
    ]) {
      for (const name of await readdir(new URL(`${role}/`, shared))) {
        const path = `${role}/${name}`;
        if (!name.endsWith('.ts') || EXCEPTIONS.has(path)) continue;
        const code = withoutComments(await readFile(new URL(path, shared), 'utf8'));
        if (STATEMENT.test(code)) offending.push(path);
      }
    }
    expect(offending).toEqual([]);
  });
});
