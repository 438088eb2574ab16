/**
 * The layout's arrows, read from the code's imports (issue 44): the product (shared/, infra/,
 * functions/) never imports the tools around it (dev/, bench/, test/, scripts/, examples/), bench/
 * and dev/ never import test/, no module imports itself through others (no import cycle, type-only
 * imports included: a circle of types is still a circle to a reader), and no source module is over
 * 800 lines. Each import is read from the source (comments left out) and resolved as Node resolves
 * a relative specifier; packages are not followed.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The folders whose modules are read. test/package holds what the installed packages run. */
const FOLDERS = ['shared', 'infra', 'functions', 'dev', 'bench', 'test', 'scripts', 'examples'];
const SKIPPED = [/(^|\/)node_modules\//, /^test\/package\//, /(^|\/)cdk\.out/];
/** The product: what the packages ship. */
const PRODUCT = ['shared', 'infra', 'functions'];
/** The folders whose modules are bounded in length (test suites are not). */
const BOUNDED = ['shared', 'infra', 'functions', 'dev', 'bench', 'scripts', 'examples'];
/** The longest source module, lines (the layout issue's bound). */
const MAX_LINES = 800;

/** Every module under FOLDERS, repository-relative. */
function modules(): string[] {
  const found: string[] = [];
  for (const folder of FOLDERS) {
    for (const entry of readdirSync(join(root, folder), { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !/\.(ts|js|mjs|cjs)$/.test(entry.name)) continue;
      const path = relative(root, join(entry.parentPath, entry.name));
      if (!SKIPPED.some((skip) => skip.test(path))) found.push(path);
    }
  }
  return found.sort();
}

/** Static imports and re-exports (type-only ones included) and dynamic imports of a literal. */
const IMPORT =
  /(?:^|[^\w.$])(?:import|export)\s+(?:type\s+)?(?:[\w*{}\s,$]+?\s+from\s+)?(['"])([^'"\n]+)\1|\bimport\s*\(\s*(['"])([^'"\n]+)\3\s*\)/gm;
const withoutComments = (code: string) => code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');

/** Each module's imports of the repository's own modules, resolved. */
function importGraph(files: string[]): Map<string, string[]> {
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets = new Set<string>();
    for (const m of withoutComments(readFileSync(join(root, file), 'utf8')).matchAll(IMPORT)) {
      const specifier = m[2] ?? m[4] ?? '';
      if (!specifier.startsWith('.')) continue;
      const target = normalize(join(dirname(file), specifier));
      if (known.has(target)) targets.add(target);
    }
    graph.set(file, [...targets]);
  }
  return graph;
}

/** The import cycles: each strongly connected component of more than one module, or a self-import (Tarjan). */
function importCycles(graph: Map<string, readonly string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string) => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop() as string;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || graph.get(v)?.includes(v)) cycles.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return cycles;
}

const files = modules();
const graph = importGraph(files);
const folderOf = (path: string) => path.split('/')[0] as string;
/** `from → to` for each import from a module under `from` into one under any of `to`. */
const arrows = (from: readonly string[], to: readonly string[]) =>
  [...graph].flatMap(([file, targets]) =>
    from.includes(folderOf(file))
      ? targets.filter((t) => to.includes(folderOf(t))).map((t) => `${file} → ${t}`)
      : [],
  );

describe('the layout read from the imports', () => {
  it('reads the modules and their imports (the graph is not empty)', () => {
    expect(files.length).toBeGreaterThan(300);
    expect(graph.get('shared/relay/cli/bus-command.ts')).toContain('shared/platform/cli/parsers.ts');
    // A type-only import is an arrow too.
    expect(graph.get('shared/relay/pass.ts')).toContain('shared/relay/pass-options.ts');
  });

  it('the product (shared/, infra/, functions/) imports none of dev/, bench/, test/, scripts/, examples/', () => {
    expect(arrows(PRODUCT, ['dev', 'bench', 'test', 'scripts', 'examples'])).toEqual([]);
  });

  it('bench/ and dev/ import nothing from test/, and dev/ nothing from bench/', () => {
    expect(arrows(['bench'], ['test'])).toEqual([]);
    expect(arrows(['dev'], ['test', 'bench'])).toEqual([]);
  });

  it('no import cycle among the repository’s modules', () => {
    expect(importCycles(graph)).toEqual([]);
  });

  it('finds a cycle when there is one (the check can fail)', () => {
    const circle = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts']],
      ['d.ts', ['a.ts']],
      ['e.ts', ['e.ts']],
    ]);
    expect(importCycles(circle)).toEqual([['a.ts', 'b.ts', 'c.ts'], ['e.ts']]);
  });

  it(`no source module outside test/ is over ${MAX_LINES} lines`, () => {
    const long = files
      .filter((f) => BOUNDED.includes(folderOf(f)))
      .map((f) => ({ f, lines: readFileSync(join(root, f), 'utf8').split('\n').length - 1 }))
      .filter(({ lines }) => lines > MAX_LINES)
      .map(({ f, lines }) => `${f}: ${lines} lines`);
    expect(long).toEqual([]);
  });
});
