/**
 * The reference tables of the docs against the code they describe, so that a variable or a prop
 * added to the code cannot be left out of its table: every environment variable named in
 * shared/platform/names.ts (`EnvVar`) is in docs/configuration.md (a row of its table, or the
 * paragraph of the variables the construct sets on its own functions), and every prop of
 * `OutboxRelayProps` (infra/props.ts) is a row of docs/relay-construct.md's props table.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { EnvVar } from '../../shared/platform/names.ts';

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

/** The backticked names in the first cell of each row of the tables under `heading`. */
function firstCellNames(markdown: string, heading: string): Set<string> {
  const start = markdown.indexOf(heading);
  const rest = markdown.slice(start + heading.length);
  const end = rest.search(/^#{1,3} /m);
  const section = end < 0 ? rest : rest.slice(0, end);
  const names = new Set<string>();
  for (const line of section.split('\n')) {
    const cell = /^\|([^|]*)\|/.exec(line)?.[1] ?? '';
    for (const [, name] of cell.matchAll(/`([^`]+)`/g)) if (name) names.add(name);
  }
  return names;
}

describe('docs/configuration.md', () => {
  it('names every environment variable the code reads (shared/platform/names.ts)', () => {
    const docs = read('docs/configuration.md');
    const table = firstCellNames(docs, '## Environment variables');
    const missing = Object.values(EnvVar).filter(
      (name) => !table.has(name) && !new RegExp(`Set by the construct[\\s\\S]*?\`${name}\``).test(docs),
    );
    expect(missing).toEqual([]);
  });
});

describe('docs/relay-construct.md', () => {
  it('has a row for every prop of OutboxRelayProps (infra/props.ts)', () => {
    const source = read('infra/props.ts');
    const body = /export interface OutboxRelayProps \{([\s\S]*?)\n\}/.exec(source)?.[1] ?? '';
    const props = [...body.matchAll(/^ {2}readonly (\w+)\??:/gm)].map((m) => m[1] as string);
    expect(props.length).toBeGreaterThan(20);
    const table = firstCellNames(read('docs/relay-construct.md'), '## `new OutboxRelay(scope, id, props)`');
    expect(props.filter((p) => !table.has(p))).toEqual([]);
  });
});
